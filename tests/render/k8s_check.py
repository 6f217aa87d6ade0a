"""Validate rendered Kubernetes objects against the training operator's published schema and its webhook.

Schema: the Kubeflow training SDK's models (`kubeflow-training` on PyPI, generated from the training-operator's
OpenAPI spec, hack/python-sdk/swagger.json, with the Kubernetes client's models for the pod template) walked
strictly: every key must be a field of its model (the API server's strict field validation refuses unknown fields),
every value of the field's type, and every model is constructed, which checks its required fields.
Webhook: the rules of training-operator v1.9.0 pkg/webhooks/pytorch/pytorchjob_webhook.go (validatePyTorchJob),
and the CRD's documented enums (restartPolicy: Always, OnFailure, Never, ExitCode).
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


def validate_pytorchjob_yaml(text: str) -> list[dict[str, Any]]:
    """The two documents, each validated; AssertionError with every problem found."""
    import yaml

    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["ConfigMap", "PyTorchJob"], [d.get("kind") for d in docs]
    strict(docs[0], "V1ConfigMap", "ConfigMap")
    strict(docs[1], "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    errs = webhook_errors(docs[1])
    assert not errs, errs
    return docs
