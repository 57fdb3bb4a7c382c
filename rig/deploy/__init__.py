"""The first half of the flow, before anything boots: recipe (the validated source of truth) ->
render (Dockerfile and compose files) -> build (the image on a digest-pinned base) -> pin (base
digests from the registry; a lab image's per machine in pins.py). rehearse.py builds a GPU
recipe's Dockerfile on the container lab's stand-in base."""
