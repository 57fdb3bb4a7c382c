"""The real schemas a rendered Kubernetes manifest is held to, offline.

Built-in kinds (Service, Deployment) go through `kubernetes-validate`, which bundles the OpenAPI
schemas of each Kubernetes release; its strict variant refuses a field the API does not define, as
`kubectl apply` does (field validation Strict, kubectl's default since 1.27). A LeaderWorkerSet goes
through its CRD's openAPIV3Schema from a pinned LWS release (schemas/), read as OpenAPI 3.0
(JSON Schema draft 4 keywords), with every object that lists its properties closed the same way:
the apiserver's strict field validation refuses an unknown field of a structural CRD schema too.
The CRD leaves `metadata` open (the apiserver checks it as ObjectMeta), so that is checked against
the bundled ObjectMeta schema.

The OpenAPI schemas type a resource quantity as string-or-number and no more; the apiserver then
parses it (apimachinery resource.Quantity) and holds an extended resource such as nvidia.com/gpu
to a whole number with requests equal to limits (core/validation, validateExtendedResourceName and
ValidateResourceRequirements). Those two rules are checked here as well, after the schemas.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

# The oldest Kubernetes release still under wide support and the newest kubernetes-validate bundles
# for this pin (pyproject's dev extra): a manifest passes both.
K8S_VERSIONS = ("1.30", "1.37")
LWS_RELEASE = "v0.10.0"
LWS_SCHEMA = Path(__file__).parent / "schemas" / f"leaderworkerset-{LWS_RELEASE}.yaml"


def _closed(schema: Any) -> Any:
    """Every object schema that lists its properties refuses others (unless it preserves unknown fields)."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: (_closed(value) if key != "properties" else {name: _closed(sub) for name, sub in value.items()})
              for key, value in schema.items()}
    if "properties" in closed and "additionalProperties" not in closed and not closed.get("x-kubernetes-preserve-unknown-fields"):
        closed["additionalProperties"] = False
    return closed


@functools.cache
def _lws_validator() -> jsonschema.Draft4Validator:
    schema = _closed(yaml.safe_load(LWS_SCHEMA.read_text()))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


# apimachinery/pkg/api/resource/quantity.go (splitREString): a number, then an optional suffix.
QUANTITY = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?")
WHOLE = re.compile(r"[0-9]+")


def _pod_specs(document: dict[str, Any]) -> list[dict[str, Any]]:
    spec = document.get("spec", {})
    templates = [spec.get("template")] + [spec.get("leaderWorkerTemplate", {}).get(role) for role in ("leaderTemplate", "workerTemplate")]
    return [t["spec"] for t in templates if t]


def _check_quantities(document: dict[str, Any]) -> None:
    for pod in _pod_specs(document):
        for volume in pod.get("volumes", []):
            size = volume.get("emptyDir", {}).get("sizeLimit")
            if size is not None and not QUANTITY.fullmatch(str(size)):
                raise jsonschema.ValidationError(f"volume {volume['name']}: sizeLimit {size!r} is not a quantity")
    for container in (c for pod in _pod_specs(document) for c in pod.get("containers", [])):
        resources = container.get("resources", {})
        for kind in ("limits", "requests"):
            for name, value in resources.get(kind, {}).items():
                if not QUANTITY.fullmatch(str(value)):
                    raise jsonschema.ValidationError(f"{container['name']}: {kind}.{name} {value!r} is not a quantity")
                if "/" in name and not name.startswith("kubernetes.io/") and not WHOLE.fullmatch(str(value)):
                    raise jsonschema.ValidationError(f"{container['name']}: {kind}.{name} {value!r}: an extended resource is a whole number")
        limits, requests = resources.get("limits", {}), resources.get("requests", {})
        for name in (n for n in requests if "/" in n):
            if name not in limits or str(limits[name]) != str(requests[name]):
                raise jsonschema.ValidationError(f"{container['name']}: {name}: an extended resource's request must equal its limit")


def validate(document: dict[str, Any], version: str) -> None:
    """Raises jsonschema.ValidationError (kubernetes_validate's errors are one) when `document` is refused."""
    if document.get("apiVersion") == "leaderworkerset.x-k8s.io/v1" and document.get("kind") == "LeaderWorkerSet":
        error = jsonschema.exceptions.best_match(_lws_validator().iter_errors(document))
        if error is not None:
            raise error
        # ObjectMeta as the apiserver reads it: any built-in kind's metadata is that schema
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": document["metadata"]},
                                     version, strict=True)
    else:
        kubernetes_validate.validate(document, version, strict=True)
    _check_quantities(document)
