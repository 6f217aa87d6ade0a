"""Validate rendered Kubernetes objects against the training operator's published schema and its webhook.

Schema: the Kubeflow training SDK's models (`kubeflow-training` on PyPI, generated from the training-operator's
OpenAPI spec, hack/python-sdk/swagger.json, with the Kubernetes client's models for the pod template) walked
strictly: every key must be a field of its model (the API server's strict field validation refuses unknown fields),
every value of the field's type, and every model is constructed, which checks its required fields.
Webhook: the rules of training-operator v1.9.0 pkg/webhooks/pytorch/pytorchjob_webhook.go (validatePyTorchJob),
and the CRD's documented enums (restartPolicy: Always, OnFailure, Never, ExitCode).
ComputeDomain (GB200/GB300 jobs that count NVLink across trays): the openAPIV3Schema of NVIDIA's DRA driver CRD
(NVIDIA/k8s-dra-driver-gpu@22407113 deployments/helm/dra-driver-nvidia-gpu/crds/
resource.nvidia.com_computedomains.yaml), its spec part transcribed below, applied as the API server applies a
structural schema (types, required fields, enums, minimums; unknown fields refused, as strict field validation does),
and the pod-side rule of the API server (pkg/apis/core/validation: a container's resources.claims must name one of
the pod's resourceClaims).
"""

from __future__ import annotations

import re
from typing import Any

PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "object": (object,),
    "datetime": (str,),
    "date": (str,),
}
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")


def _model(name: str) -> Any:
    import kubeflow.training.models as kf
    import kubernetes.client.models as k8s

    cls = getattr(kf, name, None) or getattr(k8s, name, None)
    if cls is None:
        raise AssertionError(f"no SDK model {name}")
    return cls


def strict(data: Any, type_name: str, path: str) -> Any:
    """`data` as an instance of SDK type `type_name`; AssertionError naming the path when it is not one."""
    if type_name in PRIMITIVES:
        ok = isinstance(data, PRIMITIVES[type_name]) and not (type_name in ("int", "float") and isinstance(data, bool))
        assert ok, f"{path}: expected {type_name}, got {data!r}"
        return data
    if type_name.startswith("list["):
        assert isinstance(data, list), f"{path}: expected a list, got {data!r}"
        return [strict(v, type_name[5:-1], f"{path}[{i}]") for i, v in enumerate(data)]
    if type_name.startswith("dict("):
        assert isinstance(data, dict), f"{path}: expected a map, got {data!r}"
        value_type = type_name[5:-1].split(", ", 1)[1]
        return {k: strict(v, value_type, f"{path}.{k}") for k, v in data.items()}
    cls = _model(type_name)
    assert isinstance(data, dict), f"{path}: expected a {type_name} object, got {data!r}"
    by_json = {json_key: py for py, json_key in cls.attribute_map.items()}
    unknown = sorted(set(data) - set(by_json))
    assert not unknown, f"{path}: unknown field(s) {unknown} of {type_name}"
    kwargs = {by_json[k]: strict(v, cls.openapi_types[by_json[k]], f"{path}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a required field is missing (the models' client-side validation)
        raise AssertionError(f"{path}: {exc}") from exc


def webhook_errors(job: dict[str, Any]) -> list[str]:
    """validatePyTorchJob (pytorchjob_webhook.go, v1.9.0) and the CRD's restartPolicy values."""
    errs = []
    name = job.get("metadata", {}).get("name", "")
    if not DNS1035.fullmatch(name) or len(name) > 63:
        errs.append(f"metadata.name {name!r} is not a DNS-1035 label")
    spec = job.get("spec", {})
    replicas = spec.get("pytorchReplicaSpecs")
    if not replicas:
        return [*errs, "spec.pytorchReplicaSpecs must be required"]
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if "Worker" not in replicas:
            errs.append("spec.pytorchReplicaSpecs[Worker]: must be configured if elastic policy is used")
        if "nProcPerNode" in elastic and "nprocPerNode" in spec:
            errs.append("spec.elasticPolicy.nProcPerNode: must not be used with spec.nprocPerNode")
    for kind, rs in replicas.items():
        if kind not in ("Master", "Worker"):
            errs.append(f"spec.pytorchReplicaSpecs[{kind}]: not a supported replica type")
        containers = rs.get("template", {}).get("spec", {}).get("containers") or []
        if not containers:
            errs.append(f"{kind}: containers must be specified")
        errs += [
            f"{kind}: containers[{i}].image must be required" for i, c in enumerate(containers) if not c.get("image")
        ]
        if not any(c.get("name") == "pytorch" for c in containers):
            errs.append(f"{kind}: must have at least one container with name pytorch")
        count = rs.get("replicas")
        if kind == "Master" and count != 1:
            errs.append("Master.replicas: must be 1")
        if kind == "Worker" and count is not None and count < 1:
            errs.append("Worker.replicas: must be at least 1")
        if rs.get("restartPolicy", "Never") not in RESTART_POLICIES:
            errs.append(f"{kind}.restartPolicy {rs.get('restartPolicy')!r} is not one of {RESTART_POLICIES}")
    return errs


# ComputeDomainSpec of resource.nvidia.com/v1beta1 (the CRD's openAPIV3Schema, spec part, descriptions left out)
COMPUTE_DOMAIN_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["channel"],
    "properties": {
        "numNodes": {"type": "integer", "minimum": 0},
        "channel": {
            "type": "object",
            "required": ["resourceClaimTemplate"],
            "properties": {
                "allocationMode": {"type": "string", "enum": ["All", "Single"]},
                "resourceClaimTemplate": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}},
                },
            },
        },
    },
}
TYPES = {"object": dict, "string": str, "integer": int}


def structural(data: Any, schema: dict[str, Any], path: str) -> list[str]:
    """What the API server refuses of `data` under a structural schema (type, required, enum, minimum, unknown)."""
    kind = schema["type"]
    if not isinstance(data, TYPES[kind]) or (kind == "integer" and isinstance(data, bool)):
        return [f"{path}: expected {kind}, got {data!r}"]
    errs = []
    if "enum" in schema and data not in schema["enum"]:
        errs.append(f"{path}: {data!r} is not one of {schema['enum']}")
    if "minimum" in schema and data < schema["minimum"]:
        errs.append(f"{path}: {data} < {schema['minimum']}")
    if kind == "object":
        props = schema.get("properties", {})
        errs += [f"{path}.{k}: required" for k in schema.get("required", []) if k not in data]
        errs += [f"{path}.{k}: unknown field" for k in data if k not in props]
        for k, v in data.items():
            if k in props:
                errs += structural(v, props[k], f"{path}.{k}")
    return errs


def compute_domain_errors(doc: dict[str, Any]) -> list[str]:
    errs = [] if doc.get("apiVersion") == "resource.nvidia.com/v1beta1" else [f"apiVersion {doc.get('apiVersion')!r}"]
    name = doc.get("metadata", {}).get("name", "")
    if not DNS1123_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        errs.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    unknown = sorted(set(doc) - {"apiVersion", "kind", "metadata", "spec"})
    return errs + [f"{k}: unknown field" for k in unknown] + structural(doc.get("spec"), COMPUTE_DOMAIN_SPEC, "spec")


def claim_errors(job: dict[str, Any], domain: dict[str, Any] | None) -> list[str]:
    """A container claims only what its pod lists; the pods claim from the domain's template, in its namespace."""
    errs = []
    for kind, rs in job["spec"]["pytorchReplicaSpecs"].items():
        spec = rs["template"]["spec"]
        listed = {c["name"]: c for c in spec.get("resourceClaims", [])}
        for c in spec["containers"]:
            errs += [
                f"{kind}: container {c['name']} claims {claim['name']!r}, not one of the pod's resourceClaims"
                for claim in c.get("resources", {}).get("claims", [])
                if claim["name"] not in listed
            ]
        templates = {c.get("resourceClaimTemplateName") for c in listed.values()}
        if domain is not None:
            made = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
            if made not in templates:
                errs.append(f"{kind}: no pod claim from the ComputeDomain's template {made!r} ({sorted(templates)})")
            if domain["metadata"].get("namespace") != job["metadata"].get("namespace"):
                errs.append("the ComputeDomain and the job are in different namespaces")
        elif listed:
            errs.append(f"{kind}: resourceClaims {sorted(listed)} without a ComputeDomain")
    return errs


def validate_pytorchjob_yaml(text: str) -> list[dict[str, Any]]:
    """The documents (ConfigMap, a ComputeDomain where NVLink spans trays, PyTorchJob), each validated; AssertionError
    with every problem found."""
    import yaml

    docs = list(yaml.safe_load_all(text))
    kinds = [d["kind"] for d in docs]
    assert kinds in (["ConfigMap", "PyTorchJob"], ["ConfigMap", "ComputeDomain", "PyTorchJob"]), kinds
    strict(docs[0], "V1ConfigMap", "ConfigMap")
    strict(docs[-1], "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    domain = docs[1] if len(docs) == 3 else None
    errs = webhook_errors(docs[-1]) + (compute_domain_errors(domain) if domain else []) + claim_errors(docs[-1], domain)
    assert not errs, errs
    return docs
