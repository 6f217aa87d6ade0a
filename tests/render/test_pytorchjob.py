"""Issue 12, defect 5: every rendered PyTorchJob validates against the training operator's schema (its Python
SDK's models) and webhook rules; restarts run as an elastic c10d job; InfiniBand gets its RDMA resource,
IPC_LOCK or the host network; the pods request CPU and memory (Guaranteed QoS); job names are DNS-1035 labels."""

from __future__ import annotations

import copy

import pytest
import yaml
from k8s_check import claim_errors, compute_domain_errors, strict, validate_pytorchjob_yaml, webhook_errors
from pydantic import ValidationError
from render_cases import fixed_result

from app.render import RenderOptions, render

IB = {"num_nodes": 2, "gpus_per_node": 8, "gpu": "H100-SXM", "nics": ["mlx5_0", "mlx5_1"], "hosts": ["a", "b"]}


def job(
    options: dict | None = None, cluster: dict | None = None, framework: str = "megatron", model: object = "llama-2-7b"
) -> tuple[dict, list[str]]:
    req = {"model": model, "cluster": cluster or IB, "training": {"global_batch_size": 64, "framework": framework}}
    par = {"tp": 2, "dp": 8} if framework == "megatron" else {"dp": 16, "zero_stage": 1}
    arts = render(fixed_result(req, par), 1, RenderOptions(**(options or {})))
    docs = validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"])
    return docs[-1], arts.notes


def pod(doc: dict, kind: str | None = None) -> dict:
    specs = doc["spec"]["pytorchReplicaSpecs"]
    return specs[kind or next(iter(specs))]["template"]["spec"]


def test_every_rendered_pytorchjob_validates(all_rendered) -> None:
    for label, _result, _rank, arts in all_rendered:
        try:
            validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"])
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from exc
    assert len(all_rendered) >= 30


def test_the_validation_can_fail() -> None:
    doc, _ = job()
    bad = copy.deepcopy(doc)
    pod(bad)["containers"][0]["resourcez"] = {}
    with pytest.raises(AssertionError, match=r"unknown field\(s\) \['resourcez'\] of V1Container"):
        strict(bad, "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    bad = copy.deepcopy(doc)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    bad["metadata"]["name"] = "7b-job"
    assert webhook_errors(bad) == ["metadata.name '7b-job' is not a DNS-1035 label", "Master.replicas: must be 1"]
    del pod(bad)["containers"][0]["name"]
    with pytest.raises(AssertionError, match="name"):
        strict(bad, "KubeflowOrgV1PyTorchJob", "PyTorchJob")


def test_restarts_make_an_elastic_c10d_job_without_restarts_a_static_one() -> None:
    static, _ = job()
    assert "elasticPolicy" not in static["spec"]
    assert {k: v["replicas"] for k, v in static["spec"]["pytorchReplicaSpecs"].items()} == {"Master": 1, "Worker": 1}
    elastic, _ = job({"max_restarts": 3})
    assert elastic["spec"]["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "rdzvId": "llama-2-7b",
        "minReplicas": 2,
        "maxReplicas": 2,
        "maxRestarts": 3,
    }
    assert {k: v["replicas"] for k, v in elastic["spec"]["pytorchReplicaSpecs"].items()} == {"Worker": 2}
    args = pod(elastic)["containers"][0]["args"]
    assert args[args.index("--rdzv-backend") + 1] == "c10d" and args[args.index("--max-restarts") + 1] == "3"
    assert "--node-rank" not in args and "--rdzv-endpoint" not in args  # the operator's PET_RDZV_ENDPOINT
    assert all(r["restartPolicy"] == "Never" for r in elastic["spec"]["pytorchReplicaSpecs"].values())


def test_infiniband_gets_the_rdma_resource_and_ipc_lock() -> None:
    doc, notes = job({"k8s_rdma_resource": "rdma/rdma_shared_device_a", "k8s_rdma_per_pod": 1})
    c = pod(doc)["containers"][0]
    assert c["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert not any("TCP sockets" in n for n in notes)
    host, _ = job({"k8s_host_network": True})
    assert pod(host)["hostNetwork"] is True and pod(host)["dnsPolicy"] == "ClusterFirstWithHostNet"
    bare, notes = job()
    assert "securityContext" not in pod(bare)["containers"][0]
    assert any("NCCL would fall back to TCP sockets" in n for n in notes)


def test_pods_request_cpu_and_memory_as_much_as_their_limits() -> None:
    doc, _ = job()
    res = pod(doc)["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}
    offload, _ = job(framework="deepspeed", cluster={**IB, "cpu_memory_GiB": 2048})
    assert int(pod(offload)["containers"][0]["resources"]["limits"]["memory"][:-2]) >= 256
    custom, _ = job({"k8s_cpu_per_pod": 100, "k8s_memory_GiB_per_pod": 900})
    assert pod(custom)["containers"][0]["resources"]["limits"] == {
        "cpu": "100",
        "memory": "900Gi",
        "nvidia.com/gpu": "8",
    }


def test_the_grace_period_lets_megatron_save_on_sigterm() -> None:
    doc, _ = job()
    grace = pod(doc)["terminationGracePeriodSeconds"]
    env = {e["name"]: e["value"] for e in pod(doc)["containers"][0]["env"]}
    assert grace >= 600 and env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(grace)


def test_a_deepspeed_job_also_waits_for_its_save() -> None:
    """torchrun's 30 s default killed a DeepSpeed rank's save on SIGTERM (QA, 2026-12-06)."""
    doc, _ = job(framework="deepspeed")
    env = {e["name"]: e["value"] for e in pod(doc)["containers"][0]["env"]}
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(pod(doc)["terminationGracePeriodSeconds"])


def test_nvme_offload_mounts_the_nodes_nvme_into_the_pod() -> None:
    """ZeRO-Infinity's swap folder (ds_config.json nvme_path) was not mounted: DeepSpeed wrote it into the
    container's writable layer (about 0.5 TB per pod for Llama-2 70B on 2 nodes)."""
    cluster = {**IB, "nvme_path": "/local_nvme"}
    req = {"model": "llama-2-70b", "cluster": cluster, "training": {"global_batch_size": 64, "framework": "deepspeed"}}
    par = {"dp": 16, "zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"}
    arts = render(fixed_result(req, par), 1, RenderOptions())
    spec = pod(validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"])[-1])
    (volume,) = [v for v in spec["volumes"] if "hostPath" in v]
    assert volume["hostPath"] == {"path": "/local_nvme", "type": "Directory"}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts[volume["name"]] == "/local_nvme" and '"nvme_path": "/local_nvme"' in arts.files["ds_config.json"]
    doc, _ = job(framework="deepspeed")  # no NVMe offload: no host path
    assert not [v for v in pod(doc)["volumes"] if "hostPath" in v]


def test_checkpoints_go_to_a_claim_every_pod_mounts() -> None:
    """checkpoint_dir was written into the args and mounted nowhere: each pod saved into its own container, lost
    with it (QA, 2026-12-06). With k8s_checkpoint_claim every pod mounts the claim there; without, a note says so."""
    doc, notes = job({"checkpoint_dir": "/ckpt/run1", "k8s_checkpoint_claim": "train-ckpt"})
    for kind in doc["spec"]["pytorchReplicaSpecs"]:
        spec = pod(doc, kind)
        (volume,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
        assert volume["persistentVolumeClaim"] == {"claimName": "train-ckpt"}
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounts[volume["name"]] == "/ckpt/run1"
    assert not any("nothing is mounted at checkpoint_dir" in n for n in notes)
    doc, notes = job({"checkpoint_dir": "/ckpt/run1"})
    assert not [v for v in pod(doc)["volumes"] if "persistentVolumeClaim" in v]
    assert any("nothing is mounted at checkpoint_dir /ckpt/run1" in n for n in notes), notes
    with pytest.raises(ValidationError, match="k8s_checkpoint_claim"):
        RenderOptions(k8s_checkpoint_claim="train-ckpt")  # mounted where? needs checkpoint_dir
    with pytest.raises(ValidationError, match="k8s_checkpoint_claim"):
        RenderOptions(checkpoint_dir="/c", k8s_checkpoint_claim="Bad_Name")


def test_a_pod_larger_than_a_node_is_refused() -> None:
    """k8s_memory_GiB_per_pod 100000 rendered pods no node could schedule (QA, 2026-12-06)."""
    with pytest.raises(ValueError, match=r"k8s_memory_GiB_per_pod\(100000\) > cluster.cpu_memory_GiB\(1024\)"):
        job({"k8s_memory_GiB_per_pod": 100_000})
    doc, _ = job({"k8s_memory_GiB_per_pod": 512})
    assert pod(doc)["containers"][0]["resources"]["limits"]["memory"] == "512Gi"


def test_job_names_are_dns_1035_labels() -> None:
    with pytest.raises(ValidationError, match="job_name: '7b-run' is not a job name"):
        RenderOptions(job_name="7b-run")
    doc, _ = job(model={"preset": "llama-2-7b", "name": "70B run"})
    assert doc["metadata"]["name"] == "job-70b-run"


def test_configmap_text_that_a_block_scalar_cannot_carry_is_json_escaped() -> None:
    from app.render.render import yaml_block_safe

    assert yaml_block_safe("a\n# b\n") and not yaml_block_safe("a \n") and not yaml_block_safe("a\tb\n")
    text = yaml.safe_dump({"x": "a\tb\n"})  # the fallback is a JSON string, which YAML reads back exactly
    assert yaml.safe_load(text) == {"x": "a\tb\n"}


def gb200_docs(trays: int, options: dict | None = None) -> tuple[list[dict], list[str]]:
    """The documents of a TP2 plan on `trays` GB200 trays (4 GPUs each), validated."""
    req = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": trays, "gpu": "GB200"},
        "training": {"global_batch_size": 16 * trays},
    }
    arts = render(fixed_result(req, {"tp": 2, "dp": 2 * trays}), 1, RenderOptions(**(options or {})))
    return validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"]), arts.notes


def test_a_gb200_job_of_one_nvlink_segment_claims_an_imex_channel_in_one_clique() -> None:
    """The plan counts NVLink across 16 trays; without an IMEX channel in each pod, and the pods in one NVL72 clique,
    NCCL runs those groups over the network (the file said so in a note and asked for neither)."""
    docs, notes = gb200_docs(16, {"k8s_namespace": "team-a"})
    assert [d["kind"] for d in docs] == ["ConfigMap", "ComputeDomain", "PyTorchJob"]
    domain, job_doc = docs[1], docs[2]
    assert domain["metadata"] == {"name": "llama-2-7b-imex", "namespace": "team-a"}
    assert domain["spec"] == {"numNodes": 16, "channel": {"resourceClaimTemplate": {"name": "llama-2-7b-imex-channel"}}}
    for kind in ("Master", "Worker"):
        spec = pod(job_doc, kind)
        assert spec["resourceClaims"] == [
            {"name": "imex-channel", "resourceClaimTemplateName": "llama-2-7b-imex-channel"}
        ]
        assert spec["containers"][0]["resources"]["claims"] == [{"name": "imex-channel"}]
        labels = job_doc["spec"]["pytorchReplicaSpecs"][kind]["template"]["metadata"]["labels"]
        (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "nvidia.com/gpu.clique"
        assert term["labelSelector"]["matchLabels"].items() <= labels.items()  # it selects the job's own pods
    assert any("ComputeDomain llama-2-7b-imex" in n and "DRA driver" in n for n in notes), notes
    assert not any("podset slices" in n for n in notes)


def test_a_job_of_several_nvlink_segments_claims_the_channel_and_names_how_to_place_its_pods() -> None:
    """36 trays are two racks: a pod affinity cannot say which 18 pods share one, so there is none (a required one
    for all pods would never schedule) and a note names topology-aware scheduling; with restarts the c10d
    rendezvous numbers nodes as they join, which the note says too."""
    docs, notes = gb200_docs(36)
    domain, job_doc = docs[1], docs[2]
    assert domain["spec"]["numNodes"] == 36
    spec = pod(job_doc)
    assert (
        "affinity" not in spec and spec["resourceClaims"][0]["resourceClaimTemplateName"] == "llama-2-7b-imex-channel"
    )
    (placing,) = [n for n in notes if "podset slices" in n]
    assert "segments of 18 trays" in placing and "2 segments" in placing and "elastic" not in placing
    _, elastic_notes = gb200_docs(36, {"max_restarts": 2})
    assert any("podset slices" in n and "rendezvous" in n for n in elastic_notes), elastic_notes


def test_a_job_without_nvlink_across_nodes_claims_nothing() -> None:
    docs = validate_pytorchjob_yaml(
        render(
            fixed_result(
                {"model": "llama-2-7b", "cluster": IB, "training": {"global_batch_size": 64}}, {"tp": 2, "dp": 8}
            ),
            1,
            RenderOptions(),
        ).files["pytorchjob.yaml"]
    )
    assert [d["kind"] for d in docs] == ["ConfigMap", "PyTorchJob"]
    assert (
        "resourceClaims" not in pod(docs[1])
        and "metadata" not in docs[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    )
    one_tray, _ = gb200_docs(1)  # NVLink within the one tray: no IMEX
    assert [d["kind"] for d in one_tray] == ["ConfigMap", "PyTorchJob"]
    # a CPU smoke test (the DeepSpeed trainer) claims no GPU channel: it stayed Pending on CPU nodes (review)
    req = {"model": "llama-2-7b", "cluster": {"num_nodes": 16, "gpu": "GB200"},
           "training": {"global_batch_size": 256, "framework": "deepspeed"}}  # fmt: skip
    arts = render(fixed_result(req, {"dp": 64, "zero_stage": 1}), 1, RenderOptions(accelerator="cpu"))
    cpu = validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"])
    assert [d["kind"] for d in cpu] == ["ConfigMap", "PyTorchJob"] and "affinity" not in pod(cpu[-1])


def test_the_compute_domain_and_claim_checks_can_fail() -> None:
    docs, _ = gb200_docs(16)
    domain, job_doc = docs[1], docs[2]
    bad = copy.deepcopy(domain)
    bad["spec"]["channel"]["allocationMode"] = "Some"
    bad["spec"]["numNodes"] = -1
    del bad["spec"]["channel"]["resourceClaimTemplate"]["name"]
    bad["spec"]["nodes"] = 3
    assert sorted(compute_domain_errors(bad)) == [
        "spec.channel.allocationMode: 'Some' is not one of ['All', 'Single']",
        "spec.channel.resourceClaimTemplate.name: required",
        "spec.nodes: unknown field",
        "spec.numNodes: -1 < 0",
    ]
    assert compute_domain_errors(domain) == [] and claim_errors(job_doc, domain) == []
    bad_job = copy.deepcopy(job_doc)
    pod(bad_job, "Worker")["containers"][0]["resources"]["claims"] = [{"name": "imex"}]  # one pod template (*pod)
    assert claim_errors(bad_job, domain) == [
        f"{kind}: container pytorch claims 'imex', not one of the pod's resourceClaims" for kind in ("Master", "Worker")
    ]
    other = copy.deepcopy(domain)
    other["spec"]["channel"]["resourceClaimTemplate"]["name"] = "elsewhere"
    assert claim_errors(job_doc, other)[0].startswith(
        "Master: no pod claim from the ComputeDomain's template 'elsewhere'"
    )
    assert claim_errors(job_doc, None) == [
        "Master: resourceClaims ['imex-channel'] without a ComputeDomain",
        "Worker: resourceClaims ['imex-channel'] without a ComputeDomain",
    ]


def test_the_hosts_socket_interface_is_named_in_the_pods_only_on_the_host_network() -> None:
    """cluster.socket_ifname ens1f0 went into the pods' environment and their nccl_env.sh on the pod network, where a
    pod has eth0 only: NCCL stopped with "no socket interface found", gloo with "Unable to find address for ens1f0"
    (QA 2026-12-07). On the host network it stays; the bare-metal scripts keep it either way."""
    cluster = {**IB, "socket_ifname": "ens1f0"}
    for host_network, named in ((False, False), (True, True)):
        options = {"k8s_host_network": host_network}
        req = {"model": "llama-2-7b", "cluster": cluster, "training": {"global_batch_size": 64}}
        arts = render(fixed_result(req, {"tp": 2, "dp": 8}), 1, RenderOptions(**options))
        docs = validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"])
        env = {e["name"]: e["value"] for e in pod(docs[-1])["containers"][0]["env"]}
        in_pod = docs[0]["data"]["nccl_env.sh"]
        assert ("NCCL_SOCKET_IFNAME" in env, "GLOO_SOCKET_IFNAME" in env) == (named, named), env
        assert ("export NCCL_SOCKET_IFNAME='=ens1f0'" in in_pod) is named
        assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1" and "export NCCL_IB_HCA=" in in_pod  # the rest stays
        assert "export NCCL_SOCKET_IFNAME='=ens1f0'" in arts.files["nccl_env.sh"]
        assert "export NCCL_SOCKET_IFNAME='=ens1f0'" in arts.files["torchrun.sh"] + arts.files["nccl_env.sh"]
        assert any("names the hosts' interface" in n for n in arts.notes) is not named


def test_an_amd_gpu_pod_asks_for_amd_gpus_and_for_a_rocm_image() -> None:
    """An MI300X job requested nvidia.com/gpu, which no node of an AMD cluster advertises (its pods stayed Pending),
    and ran NVIDIA's CUDA image without a word (QA 2026-12-07)."""
    cluster = {"num_nodes": 2, "gpu": "MI300X"}
    req = {"model": "llama-2-7b", "cluster": cluster, "training": {"global_batch_size": 64}}
    arts = render(fixed_result(req, {"tp": 2, "dp": 8}), 1, RenderOptions())
    limits = pod(validate_pytorchjob_yaml(arts.files["pytorchjob.yaml"])[-1])["containers"][0]["resources"]["limits"]
    assert limits.get("amd.com/gpu") == "8" and "nvidia.com/gpu" not in limits
    assert any("is a CUDA image" in n and "ROCm" in n for n in arts.notes), arts.notes
    own = render(fixed_result(req, {"tp": 2, "dp": 8}), 1, RenderOptions(container_image="rocm/megatron-lm:latest"))
    assert not any("is a CUDA image" in n for n in own.notes)
    nvidia, _ = job()
    assert pod(nvidia)["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_the_dataset_is_mounted_from_a_claim_or_its_absence_said() -> None:
    """data_path went into the args and was mounted nowhere: each pod looked for the .bin/.idx files in its image,
    and Megatron-DeepSpeed (no mock data) failed at its data loader, unsaid (QA 2026-12-07)."""
    data = {"data_path": "/lustre/data/corpus_text_document", "tokenizer_type": "HuggingFaceTokenizer",
            "tokenizer_model": "meta-llama/Llama-2-7b-hf"}  # fmt: skip
    doc, notes = job({**data, "k8s_data_claim": "corpus", "checkpoint_dir": "/ckpt/run1",
                      "k8s_checkpoint_claim": "train-ckpt"}, framework="megatron-deepspeed")  # fmt: skip
    spec = pod(doc)
    volumes = {v["name"]: v["persistentVolumeClaim"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert volumes["dataset"] == {"claimName": "corpus", "readOnly": True}
    assert mounts["dataset"] == {"name": "dataset", "mountPath": "/lustre/data", "readOnly": True}
    assert mounts["checkpoints"] == {"name": "checkpoints", "mountPath": "/ckpt/run1"}  # written: not read-only
    assert not any("where data_path is" in n for n in notes)
    _, unmounted = job(data, framework="megatron-deepspeed")
    assert any("nothing is mounted at /lustre/data, where data_path is" in n for n in unmounted), unmounted
    # without a cache directory elsewhere Megatron writes its index cache next to the dataset: read-write, and said
    written, notes = job({**data, "k8s_data_claim": "corpus"})
    mount = next(m for m in pod(written)["containers"][0]["volumeMounts"] if m["name"] == "dataset")
    assert "readOnly" not in mount and any("mounted read-write at /lustre/data" in n for n in notes), notes
    with pytest.raises(ValidationError, match="k8s_data_claim"):
        RenderOptions(k8s_data_claim="corpus")  # mounted where? needs data_path
    for ckpt in ("/lustre/data", "/lustre/data/checkpoints", "/lustre"):  # one mount inside the other
        with pytest.raises(ValidationError, match="separate directories"):
            RenderOptions(**data, k8s_data_claim="corpus", checkpoint_dir=ckpt)
