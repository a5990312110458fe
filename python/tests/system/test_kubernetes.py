"""The Kubernetes layout in ``deploy/kubernetes/`` applies as written and holds what the design needs.

``docs/multi-node.md`` measured (``PlacementITCase``) that each GPU node's sinks stay on that node's
edge TaskManager when only that TaskManager declares the external resource ``stoker-node-<n>``,
the CPU TaskManagers declare ``stoker-cpu``, and the default scheduler runs. These tests parse
every manifest and check it against schemas and sources written by others, not against itself:

* the FlinkDeployment against the Flink Kubernetes Operator 1.15.0's CRD (a verbatim copy in
  ``fixtures/``, with its provenance), as the API server decides with strict field validation;
  every built-in resource (and the operator's pod template, and the example trainer pod) against
  ``kubernetes-validate``'s strict schemas of Kubernetes 1.30 to 1.37; deliberate breaks (a wrong
  enum, an unknown field, a wrong type) must be rejected;
* every Flink setting (``flinkConfiguration``, the start-up script's ``-D`` options, the job's
  ``args``) against the ConfigOptions of Flink 2.3 and of the job, with its value converted by
  Flink's own ``Configuration`` (``java/FlinkConfigCheck.java`` on the Flink home the build
  assembles, its plugins and the job jar);
* the FlinkDeployment carries ``flink-conf/config.yaml`` value for value (the operator replaces the
  image's config with its own, so a missing key would silently fall back to Flink's default);
* the job's arguments are options declared in ``StokerOptions.java``, and its topology (nodes, EDGE
  placement, one ack address per node) is the edge StatefulSet's: its pods' DNS names through the
  headless service and its containerPorts;
* the slot profiles the job requests fit the TaskManagers' memory as Flink 2.3 computes it: Flink's
  own ``BashJavaUtils GET_TM_RESOURCE_PARAMS`` (what ``taskmanager.sh`` runs) on the
  FlinkDeployment's config, from the Flink home that the Maven build assembles
  (``cluster/target/flink``, or ``$STOKER_FLINK_HOME`` as in ``scripts/cluster.sh``);
* the edge TaskManager's start-up script is run (with a stand-in ``taskmanager.sh`` that prints
  its arguments) for several pod names, and the resource it declares is derived from the ordinal;
* the shared-memory contract with the trainer pods (same hostPath and namespace subdirectory, the
  job directory named after the FlinkDeployment, uid/gid 9999, the batch files' bound reserved in
  the edge pod's memory request), least privilege (Pod Security "restricted" but for the listed
  exceptions), and S3 credentials from a Secret with the endpoint and region as options.

No Kubernetes cluster is involved: what these tests cannot show is that the operator and the
kubelet run the pods as intended (docs/multi-node.md says what is not run).
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from harness.paths import REPO_ROOT

K8S = REPO_ROOT / "deploy" / "kubernetes"
FLINK_CONF = REPO_ROOT / "flink-conf" / "config.yaml"
STOKER_OPTIONS = (
    REPO_ROOT / "job" / "src" / "main" / "java" / "dev" / "stoker" / "job" / "StokerOptions.java"
)
SCRIPT = K8S / "edge-taskmanager.sh"
FLINK_HOME = Path(os.environ.get("STOKER_FLINK_HOME", REPO_ROOT / "cluster" / "target" / "flink"))

#: The slot profile options, as suffixes of stoker.topology.{cpu,edge}-slot., and the TaskManager
#: resource (a dynamic property of BashJavaUtils GET_TM_RESOURCE_PARAMS) each one draws on.
PROFILE = {
    "cpu-cores": "taskmanager.cpu.cores",
    "task-heap": "taskmanager.memory.task.heap.size",
    "task-off-heap": "taskmanager.memory.task.off-heap.size",
    "managed": "taskmanager.memory.managed.size",
}

#: Keys of flink-conf/config.yaml that bind loopback; on Kubernetes Flink's defaults (the pod's
#: address) apply instead, so the FlinkDeployment must not carry them.
LOOPBACK_KEYS = {
    "jobmanager.rpc.address",
    "jobmanager.bind-host",
    "taskmanager.host",
    "taskmanager.bind-host",
    "rest.address",
    "rest.bind-address",
}


def _load(name: str) -> list[dict[str, Any]]:
    with open(K8S / name) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _one(name: str, kind: str) -> dict[str, Any]:
    docs = [d for d in _load(name) if d["kind"] == kind]
    assert len(docs) == 1, f"{name}: expected one {kind}, found {len(docs)}"
    return docs[0]


def _flink_deployment() -> dict[str, Any]:
    return _one("flinkdeployment.yaml", "FlinkDeployment")


def _edge() -> dict[str, Any]:
    return _one("edge-taskmanagers.yaml", "StatefulSet")


def _edge_container() -> dict[str, Any]:
    containers = _edge()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _edge_env() -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _edge_container()["env"]}


def _job_args() -> dict[str, str]:
    args = _flink_deployment()["spec"]["job"]["args"]
    assert len(args) % 2 == 0 and all(isinstance(a, str) for a in args), args
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert all(k.startswith("--") for k in pairs), args
    return {k[2:]: v for k, v in pairs.items()}


def _flink_string(value: Any) -> str:
    """A YAML scalar of flink-conf/config.yaml as the string Flink reads (booleans lower case)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


JOB_JAR = REPO_ROOT / "job" / "target" / "stoker-job.jar"
CONFIG_CHECK = Path(__file__).resolve().parent / "java" / "FlinkConfigCheck.java"


@functools.cache
def _option_check_jars() -> tuple[Path, ...]:
    """The jars whose ConfigOptions count: Flink's (lib/ and the plugins) and the job's."""
    lib = FLINK_HOME / "lib"
    assert lib.is_dir(), (
        f"{lib} is missing: the Maven build assembles it (mvn -q -pl cluster package, or "
        "scripts/cluster.sh build)"
    )
    assert JOB_JAR.is_file(), f"{JOB_JAR} is missing: mvn -B package -DskipTests builds it"
    jars = sorted(lib.glob("flink-*.jar")) + sorted((FLINK_HOME / "plugins").glob("*/*.jar"))
    return (*jars, JOB_JAR)


def flink_config_check(settings: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """Each (key, value) as Flink reads it: (status, value type, detail), in the same order.

    ``python/tests/system/java/FlinkConfigCheck.java`` (Java's source-file mode) on the classpath of the
    Flink home the build assembles plus its plugins and the job jar: it collects the ConfigOptions
    of Flink's and the job's option classes and converts each value with Flink's own
    ``Configuration.get``. Status OK, UNKNOWN, DEPRECATED or BAD_VALUE.
    """
    jars = _option_check_jars()
    classpath = os.pathsep.join([f"{FLINK_HOME / 'lib'}/*", *map(str, jars)])
    assert all("\t" not in k + v and "\n" not in k + v and k for k, v in settings), settings
    # a plugin's options live in its factories: all its Flink classes are read
    scan = [f"all:{j}" if j.parent.parent.name == "plugins" else str(j) for j in jars]
    proc = subprocess.run(
        ["java", "-cp", classpath, str(CONFIG_CHECK), *scan],
        input="".join(f"{k}\t{v}\n" for k, v in settings),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(settings), proc.stdout + proc.stderr
    result = []
    for (key, _), line in zip(settings, lines, strict=True):
        got_key, status, value_type, detail = line.split("\t", 3)
        assert got_key == key, line
        result.append((status, value_type, detail))
    return result


#: Pods stoker-edge-<n> whose start-up the tests run.
SCRIPT_ORDINALS = [0, 1, 11]

#: (key, value, status, detail) that FlinkConfigCheck must report.
CONFIG_CHECK_CASES = [
    # keys of 33-126 characters, which a scan of the class files' strings got wrong
    (
        "execution.checkpointing.externalized-checkpoint-retention",
        "RETAIN_ON_CANCELLATION",
        "OK",
        "",
    ),
    ("restart-strategy.exponential-delay.attempts-before-reset-backoff", "300", "OK", ""),
    # deliberate breaks: a misspelt key, values of the wrong type, a deprecated key
    ("taskmanager.memory.proces.size", "6g", "UNKNOWN", ""),
    ("taskmanager.memory.process.size", "6 gigs", "BAD_VALUE", "Could not parse value"),
    ("execution.checkpointing.interval", "10 parsecs", "BAD_VALUE", "Could not parse value"),
    ("jobmanager.scheduler", "Reactive", "BAD_VALUE", "Could not parse value"),
    ("external-resource.stoker-cpu.amount", "two", "BAD_VALUE", "Could not parse value"),
    ("stoker.prefetch-depth", "four", "BAD_VALUE", "Could not parse value"),
    # an option of the S3 plugin (declared in its filesystem factory)
    ("s3.upload.min.part.size", "big", "BAD_VALUE", "Could not parse value"),
    ("state.backend.incremental", "true", "DEPRECATED", "use execution.checkpointing.incremental"),
]

#: Results of flink_config_check by (key, value): one JVM for all settings the tests check.
_CHECKED: dict[tuple[str, str], tuple[str, str, str]] = {}


def _checked(settings: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    if not _CHECKED:
        # everything at once: the manifests' settings, the start-up script's, the cases above
        first = list(_flink_deployment()["spec"]["flinkConfiguration"].items())
        first += list(_job_args().items()) + [(k, v) for k, v, _, _ in CONFIG_CHECK_CASES]
        for ordinal in SCRIPT_ORDINALS:
            first += list(_expected_script_properties(ordinal).items())
        first = list(dict.fromkeys(first))
        _CHECKED.update(zip(first, flink_config_check(first), strict=True))
    missing = [s for s in dict.fromkeys(settings) if s not in _CHECKED]
    if missing:
        _CHECKED.update(zip(missing, flink_config_check(missing), strict=True))
    return [_CHECKED[s] for s in settings]


def _assert_flink_settings_valid(settings: dict[str, str], where: str) -> dict[str, str]:
    """Every key a current Flink 2.3 (or job) option, every value of its type; returns the types."""
    checked = dict(zip(settings, _checked(list(settings.items())), strict=True))
    wrong = {k: v for k, v in checked.items() if v[0] != "OK"}
    assert not wrong, f"{where}: settings Flink would ignore or reject: {wrong}"
    return {k: v[1] for k, v in checked.items()}


def _run_script(tmp_path: Path, pod_name: str, ranks: str) -> subprocess.CompletedProcess[str]:
    flink_home = tmp_path / "flink"
    (flink_home / "bin").mkdir(parents=True, exist_ok=True)
    stub = flink_home / "bin" / "taskmanager.sh"
    stub.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    stub.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "FLINK_HOME": str(flink_home),
        "POD_NAME": pod_name,
        "STOKER_RANKS_PER_NODE": ranks,
        "STOKER_EDGE_PROCESS_SIZE": str(_edge_env()["STOKER_EDGE_PROCESS_SIZE"]),
    }
    return subprocess.run(
        ["/bin/sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30
    )


def _dynamic_properties(argv: list[str]) -> dict[str, str]:
    assert argv[0] == "start-foreground", argv
    rest = argv[1:]
    assert len(rest) % 2 == 0 and all(a == "-D" for a in rest[::2]), argv
    return dict(p.split("=", 1) for p in rest[1::2])


def _flink_bytes(size: str) -> int:
    """A Flink MemorySize string in bytes (its units are powers of 1024: MemorySize.MemoryUnit)."""
    m = re.fullmatch(
        r"(\d+)\s*(b|bytes|k|kb|kibibytes|m|mb|mebibytes|g|gb|gibibytes|)", size.lower()
    )
    assert m, f"not a Flink memory size: {size!r}"
    shift = {"": 0, "b": 0, "k": 10, "m": 20, "g": 30}[m.group(2)[:1]]
    return int(m.group(1)) << shift


def _quantity_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity with a binary suffix (Ki, Mi, Gi) in bytes."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert m, f"not a binary Kubernetes quantity: {quantity!r}"
    return int(m.group(1)) << {"Ki": 10, "Mi": 20, "Gi": 30}[m.group(2)]


def _taskmanager_resources(tmp_path: Path, dynamic: dict[str, str] | None = None) -> dict[str, str]:
    """What Flink gives a TaskManager of the FlinkDeployment's config plus ``dynamic`` (-D).

    Flink's ``BashJavaUtils GET_TM_RESOURCE_PARAMS``, which ``taskmanager.sh`` runs with the same
    -D options before it starts the JVM: its second result line is the TaskManager's derived
    settings (task heap, managed memory, CPU cores, slots) as -D key=value.
    """
    lib = FLINK_HOME / "lib"
    assert lib.is_dir(), (
        f"{lib} is missing: the Maven build assembles it (mvn -q -pl cluster package, or "
        "scripts/cluster.sh build)"
    )
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir(exist_ok=True)
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf))
    cmd = ["java", "-cp", f"{lib}/*", "org.apache.flink.runtime.util.bash.BashJavaUtils"]
    cmd += ["GET_TM_RESOURCE_PARAMS", "--configDir", str(conf_dir)]
    for key, value in (dynamic or {}).items():
        cmd += ["-D", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    marker = "BASH_JAVA_UTILS_EXEC_RESULT:"
    results = [line[len(marker) :] for line in proc.stdout.splitlines() if line.startswith(marker)]
    assert proc.returncode == 0 and len(results) == 2, proc.stdout + proc.stderr
    words = shlex.split(results[1])
    assert all(w == "-D" for w in words[::2]), results[1]
    return dict(w.split("=", 1) for w in words[1::2])


def _slot_profile(kind: str) -> dict[str, float]:
    """The job's stoker.topology.<kind>-slot.* args: cores, and memory in bytes."""
    args = _job_args()
    prefix = f"stoker.topology.{kind}-slot."
    return {
        name: float(args[prefix + name])
        if name == "cpu-cores"
        else _flink_bytes(args[prefix + name])
        for name in PROFILE
    }


def _assert_slots_fit(kind: str, slots: int, tm: dict[str, str]) -> dict[str, float]:
    """``slots`` x the <kind>-slot profile fit the TaskManager ``tm``; returns the share used."""
    profile = _slot_profile(kind)
    share = {}
    for name, resource in PROFILE.items():
        have = float(tm[resource]) if name == "cpu-cores" else _flink_bytes(tm[resource])
        need = slots * profile[name]
        assert need <= have, (
            f"{slots} x stoker.topology.{kind}-slot.{name} = {need:.0f} > the TaskManager's "
            f"{resource} = {have:.0f}: Flink cannot place the slots"
        )
        share[name] = need / have if have else 1.0
    return share


def test_every_manifest_parses_and_kustomization_lists_them() -> None:
    manifests = sorted(p.name for p in K8S.glob("*.yaml"))
    assert manifests == [
        "edge-taskmanagers.yaml",
        "flinkdeployment.yaml",
        "kustomization.yaml",
        "namespace.yaml",
    ]
    for name in manifests:
        for doc in _load(name):
            assert doc["apiVersion"] and doc["kind"], f"{name}: a document without apiVersion/kind"
    kustomization = _one("kustomization.yaml", "Kustomization")
    assert sorted(kustomization["resources"]) == sorted(set(manifests) - {"kustomization.yaml"})
    # One namespace for all of it: the operator watches it, the Secret and the trainers live there.
    namespace = _one("namespace.yaml", "Namespace")
    assert kustomization["namespace"] == namespace["metadata"]["name"]
    # hostPath needs the privileged Pod Security level; the rest is reported against restricted.
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    generated = {g["name"]: g["files"] for g in kustomization["configMapGenerator"]}
    assert generated == {"stoker-edge-start": [SCRIPT.name]}


def test_flink_deployment_is_standalone_with_default_scheduler_savepoints_and_kubernetes_ha() -> (
    None
):
    fd = _flink_deployment()
    assert fd["apiVersion"] == "flink.apache.org/v1beta1"
    spec = fd["spec"]
    # Native mode would let Flink request TaskManager pods for a resource no pod can have.
    assert spec["mode"] == "standalone"
    # The newest flinkVersion the operator's CRD accepts up to the build's Flink: v2_2 for Flink
    # 2.3 with the 1.15.0 CRD (its enum ends there; the operator treats v2_2 and v2_3 alike).
    assert spec["flinkVersion"] == _crd_flink_version()
    conf = spec["flinkConfiguration"]
    # Flink reads this map as strings; a YAML number or boolean is a mistake.
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in conf.items()), conf
    # The adaptive scheduler drops the slot profiles (PlacementITCase); Reactive Mode is adaptive.
    assert conf.get("jobmanager.scheduler", "default").lower() == "default"
    assert "scheduler-mode" not in conf
    assert conf["high-availability.type"] == "kubernetes"
    assert conf["high-availability.storageDir"].startswith("s3://")
    assert conf["execution.checkpointing.dir"].startswith("s3://")
    assert conf["execution.checkpointing.savepoint-dir"].startswith("s3://")
    # The operator sets the process sizes from the pods' memory; they must be the config's.
    assert spec["jobManager"]["resource"]["memory"] == conf["jobmanager.memory.process.size"]
    assert spec["taskManager"]["resource"]["memory"] == conf["taskmanager.memory.process.size"]
    job = spec["job"]
    assert job["upgradeMode"] == "savepoint"
    assert job["jarURI"] == "local:///opt/flink/usrlib/stoker-job.jar"


def test_flink_configuration_is_the_production_config_plus_kubernetes_keys() -> None:
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    production = yaml.safe_load(FLINK_CONF.read_text())
    assert LOOPBACK_KEYS <= production.keys()
    for key, value in production.items():
        if key in LOOPBACK_KEYS:
            assert key not in conf, f"{key} binds loopback; on Kubernetes the pod's address applies"
        elif key.startswith("high-availability."):
            # the production config's ZooKeeper HA is replaced by Kubernetes HA (checked above)
            if key.startswith("high-availability.zookeeper.") or key.endswith(".cluster-id"):
                assert key not in conf, f"{key}: ZooKeeper HA or a fixed cluster id on Kubernetes"
        else:
            assert conf.get(key) == _flink_string(value), (
                f"{key}: {conf.get(key)!r} != {value!r} in {FLINK_CONF}"
            )
    added = set(conf) - set(production)
    assert added, "no Kubernetes keys"


def test_every_flink_key_is_a_flink_option_with_a_value_of_its_type() -> None:
    """Flink ignores an unknown key and fails late on a bad value: check each as Flink reads it."""
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    types = _assert_flink_settings_valid(conf, "flinkConfiguration")
    # Spot checks that the types are Flink's, not strings for everything.
    assert types["taskmanager.memory.process.size"] == "MemorySize"
    assert types["execution.checkpointing.interval"] == "Duration"
    assert types["external-resource.stoker-cpu.amount"] == "Long"
    assert types["jobmanager.scheduler"].endswith("SchedulerType")


def test_job_args_have_values_of_their_option_types() -> None:
    types = _assert_flink_settings_valid(_job_args(), "job args")
    assert types["stoker.prefetch-depth"] == "Integer"
    assert types["stoker.topology.edge-slot.task-heap"] == "MemorySize"


@pytest.mark.parametrize(("key", "value", "status", "detail"), CONFIG_CHECK_CASES)
def test_flink_config_check_reports_unknown_keys_bad_values_and_deprecated_keys(
    key: str, value: str, status: str, detail: str
) -> None:
    (got,) = _checked([(key, value)])
    assert got[0] == status and detail in got[2], got


def test_cpu_taskmanagers_declare_only_stoker_cpu() -> None:
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    assert conf["external-resources"] == "stoker-cpu"
    assert int(conf["external-resource.stoker-cpu.amount"]) >= 1
    assert not [k for k in conf if "stoker-node" in k or "stoker-node" in conf[k]]


def _expected_script_properties(ordinal: int) -> dict[str, str]:
    """The -D options edge-taskmanager.sh must pass in pod stoker-edge-<ordinal>."""
    ranks = str(_edge_env()["STOKER_RANKS_PER_NODE"])
    node = f"stoker-node-{ordinal}"
    return {
        "external-resources": node,
        f"external-resource.{node}.amount": ranks,
        "taskmanager.numberOfTaskSlots": ranks,
        "taskmanager.memory.process.size": str(_edge_env()["STOKER_EDGE_PROCESS_SIZE"]),
        "taskmanager.resource-id": f"{_edge()['metadata']['name']}-{ordinal}",
    }


@pytest.mark.parametrize("ordinal", SCRIPT_ORDINALS)
def test_edge_start_script_declares_the_resource_of_its_ordinal(
    tmp_path: Path, ordinal: int
) -> None:
    ranks = str(_edge_env()["STOKER_RANKS_PER_NODE"])
    pod = f"{_edge()['metadata']['name']}-{ordinal}"
    result = _run_script(tmp_path, pod, ranks)
    assert result.returncode == 0, result.stderr
    props = _dynamic_properties(result.stdout.splitlines())
    assert props == _expected_script_properties(ordinal)
    _assert_flink_settings_valid(props, SCRIPT.name)


@pytest.mark.parametrize(
    ("pod", "ranks", "message"),
    [
        ("stoker-edge", "8", "no StatefulSet ordinal"),
        ("stoker-edge-1a", "8", "no StatefulSet ordinal"),
        ("stoker-edge-1", "0", "positive integer"),
        ("stoker-edge-1", "eight", "positive integer"),
    ],
)
def test_edge_start_script_refuses_a_pod_name_without_ordinal_or_bad_ranks(
    tmp_path: Path, pod: str, ranks: str, message: str
) -> None:
    result = _run_script(tmp_path, pod, ranks)
    assert result.returncode != 0
    assert message in result.stderr and result.stdout == ""


def test_edge_statefulset_runs_one_small_taskmanager_per_gpu_node_on_the_cluster_config() -> None:
    fd = _flink_deployment()
    sts = _edge()
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"] == labels
    spec = pod["spec"]
    # One per node: required anti-affinity against its own pods, per host.
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == labels
    assert spec["nodeSelector"] and spec["tolerations"]
    # The governing service exists and is headless.
    service = _one("edge-taskmanagers.yaml", "Service")
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == labels
    # Same image and account as the FlinkDeployment (HA leader retrieval reads its ConfigMaps).
    container = _edge_container()
    assert container["image"] == fd["spec"]["image"]
    assert spec["serviceAccountName"] == fd["spec"]["serviceAccount"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # The cluster's config: Flink's ConfigMap of the FlinkDeployment, as FLINK_CONF_DIR.
    assert volumes["flink-config"]["configMap"]["name"] == f"flink-config-{fd['metadata']['name']}"
    assert mounts["flink-config"] == _edge_env()["FLINK_CONF_DIR"]
    # The start-up script: the generated ConfigMap, run from where it is mounted.
    assert volumes["start"]["configMap"]["name"] == "stoker-edge-start"
    assert container["command"] == ["/bin/sh", f"{mounts['start']}/{SCRIPT.name}"]
    assert _edge_env()["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The node's /dev/shm (shared with the trainer pod) is where the job writes its batches
    # (the contract itself: test_shared_memory_contract_*).
    output_root = _job_args()["stoker.output.root"]
    assert mounts["node-shm"] == output_root and output_root.startswith("/dev/shm/")
    # A sink binds its pod's name when it starts: the name must resolve before the pod is Ready.
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_job_args_are_stoker_options_and_world_size_is_nodes_times_ranks() -> None:
    declared = set(re.findall(r'ConfigOptions\.key\("([^"]+)"\)', STOKER_OPTIONS.read_text()))
    assert "stoker.dp-world-size" in declared
    args = _job_args()
    unknown = set(args) - declared
    assert not unknown, f"job args that are no Stoker option: {sorted(unknown)}"
    nodes = _edge()["spec"]["replicas"]
    ranks_per_node = int(_edge_env()["STOKER_RANKS_PER_NODE"])
    assert int(args["stoker.dp-world-size"]) == nodes * ranks_per_node


def test_job_topology_is_the_edge_statefulset_nodes_names_and_ports() -> None:
    args = _job_args()
    sts = _edge()
    nodes = sts["spec"]["replicas"]
    ranks = int(_edge_env()["STOKER_RANKS_PER_NODE"])
    assert int(args["stoker.topology.nodes"]) == nodes
    # Pinned by the resources only the edge TaskManagers (and stoker-cpu the CPU ones) declare.
    assert args["stoker.topology.placement"] == "EDGE"
    addresses = args["stoker.topology.ack-addresses"].split(";")
    assert len(addresses) == nodes, addresses
    service = _one("edge-taskmanagers.yaml", "Service")["metadata"]["name"]
    container_ports = {p["containerPort"] for p in _edge_container()["ports"]}
    for n, address in enumerate(addresses):
        host, port = address.rsplit(":", 1)
        # Pod n's DNS name through the headless service (short, or with namespace and svc).
        pod = f"{sts['metadata']['name']}-{n}"
        assert re.fullmatch(
            rf"{re.escape(pod)}\.{re.escape(service)}(\.[a-z0-9-]+\.svc(\.cluster\.local)?)?", host
        ), f"node {n}'s ack address {address} is not pod {pod} of the service {service}"
        # Sink subtask k (local rank k) listens on port + k: the pod declares each of them.
        assert {int(port) + k for k in range(ranks)} == container_ports, (
            f"node {n}: ports {port}+0..{ranks - 1} vs containerPorts {sorted(container_ports)}"
        )


def test_job_states_every_slot_profile_option() -> None:
    """The defaults fit the 2g local cluster's TaskManagers; on Kubernetes each is sized here."""
    declared = set(re.findall(r'ConfigOptions\.key\("([^"]+)"\)', STOKER_OPTIONS.read_text()))
    profile_keys = {
        k for k in declared if re.fullmatch(r"stoker\.topology\.(cpu|edge)-slot\..+", k)
    }
    assert profile_keys == {
        f"stoker.topology.{kind}-slot.{n}" for kind in ("cpu", "edge") for n in PROFILE
    }
    assert profile_keys <= set(_job_args())


def test_cpu_slot_profile_takes_half_of_a_cpu_taskmanager(tmp_path: Path) -> None:
    tm = _taskmanager_resources(tmp_path)
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    slots = int(tm["taskmanager.numberOfTaskSlots"])
    assert slots == int(conf["taskmanager.numberOfTaskSlots"])
    share = _assert_slots_fit("cpu", slots, tm)
    # The slots request the TaskManager's task heap and managed memory, not a fraction of it
    # (what a TaskManager has beyond its slots' profiles no subtask can use).
    assert share["task-heap"] >= 0.9 and share["managed"] >= 0.9, share


def test_edge_slot_profiles_of_all_ranks_fit_the_edge_taskmanager(tmp_path: Path) -> None:
    ranks = int(_edge_env()["STOKER_RANKS_PER_NODE"])
    # The edge TaskManager as the start-up script starts it: its -D options on the cluster config.
    result = _run_script(tmp_path, f"{_edge()['metadata']['name']}-0", str(ranks))
    assert result.returncode == 0, result.stderr
    tm = _taskmanager_resources(tmp_path, _dynamic_properties(result.stdout.splitlines()))
    assert int(tm["taskmanager.numberOfTaskSlots"]) == ranks
    share = _assert_slots_fit("edge", ranks, tm)
    # STOKER_EDGE_PROCESS_SIZE is sized to the ranks' task heap, not far beyond it.
    assert share["task-heap"] >= 0.9, share


# --- The real schemas: the operator's CRD and the Kubernetes API ------------------------------

#: The Flink Kubernetes Operator's FlinkDeployment CRD, as its Helm chart 1.15.0 installs it
#: (where it came from: SOURCE.md beside it).
CRD = (
    Path(__file__).resolve().parent
    / "fixtures"
    / "flink-kubernetes-operator-1.15.0"
    / "flinkdeployments.flink.apache.org-v1.yml"
)

#: The Kubernetes versions the layout is checked against: kubernetes-validate's strict schemas.
KUBERNETES_VERSIONS = [f"1.{minor}" for minor in range(30, 38)]

EXAMPLE_TRAINER = K8S / "examples" / "trainer-pod.yaml"


@functools.cache
def _crd() -> dict[str, Any]:
    with open(CRD) as f:
        crd: dict[str, Any] = yaml.safe_load(f)
    return crd


def _crd_flink_version() -> str:
    """The newest flinkVersion the CRD accepts that is not newer than the build's Flink."""
    m = re.search(r"<flink\.version>(\d+)\.(\d+)\.", (REPO_ROOT / "pom.xml").read_text())
    assert m
    build = (int(m.group(1)), int(m.group(2)))
    (version,) = [v for v in _crd()["spec"]["versions"] if v["name"] == "v1beta1"]
    enum = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    accepted = [
        (int(v.group(1)), int(v.group(2)))
        for v in (re.fullmatch(r"v(\d+)_(\d+)", e) for e in enum["flinkVersion"]["enum"])
        if v
    ]
    best = max(v for v in accepted if v <= build)
    return f"v{best[0]}_{best[1]}"


def _structural_to_json_schema(node: Any) -> Any:
    """A CRD's openAPIV3Schema as a JSON Schema that decides as the API server does.

    Kubernetes rejects unknown fields (strict field validation, kubectl's default) except under
    ``x-kubernetes-preserve-unknown-fields``; ``x-kubernetes-int-or-string`` takes an integer or a
    string; ``nullable`` admits null. JSON Schema allows unknown properties unless told otherwise.
    """
    if isinstance(node, list):
        return [_structural_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural_to_json_schema(v) for k, v in node.items() if not k.startswith("x-")}
    if node.get("x-kubernetes-int-or-string"):
        out = {k: v for k, v in out.items() if k != "type"}
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _crd_errors(resource: dict[str, Any]) -> list[str]:
    (version,) = [
        v for v in _crd()["spec"]["versions"] if resource["apiVersion"].endswith("/" + v["name"])
    ]
    assert resource["apiVersion"].split("/")[0] == _crd()["spec"]["group"]
    assert resource["kind"] == _crd()["spec"]["names"]["kind"]
    schema = _structural_to_json_schema(version["schema"]["openAPIV3Schema"])
    # apiVersion, kind and metadata: every object has them, the API server checks metadata as
    # an ObjectMeta (here: kubernetes-validate's, through a ConfigMap with the same metadata)
    schema["properties"] |= {"apiVersion": {"type": "string"}, "kind": {"type": "string"}}
    schema["properties"]["metadata"] = {"type": "object"}
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(resource)]
    meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": resource.get("metadata")}
    meta_error = _kubernetes_error(meta, KUBERNETES_VERSIONS[-1])
    return errors + ([f"metadata: {meta_error}"] if meta_error else [])


def _kubernetes_error(resource: dict[str, Any], version: str) -> str | None:
    """kubernetes-validate's strict schema of the resource's kind at that Kubernetes version."""
    try:
        kubernetes_validate.validate(resource, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"{list(e.absolute_path)}: {e.message}"
    return None


def _kubernetes_resources() -> list[dict[str, Any]]:
    """Every built-in resource kubectl apply -k creates, as kustomize emits it, and the examples."""
    docs = _load("namespace.yaml") + _load("edge-taskmanagers.yaml")
    namespace = _one("kustomization.yaml", "Kustomization")["namespace"]
    for doc in docs:
        if doc["kind"] != "Namespace":
            doc["metadata"]["namespace"] = namespace
    # the configMapGenerator's ConfigMap (kustomize appends a hash to the name and the references)
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "stoker-edge-start", "namespace": namespace},
            "data": {SCRIPT.name: SCRIPT.read_text()},
        }
    )
    # the operator makes the pods from the podTemplate: it must be a valid Pod itself
    docs.append(copy.deepcopy(_flink_deployment()["spec"]["podTemplate"]))
    with open(EXAMPLE_TRAINER) as f:
        docs.append(yaml.safe_load(f))
    return docs


def test_flink_deployment_passes_the_operator_crd() -> None:
    assert _crd_errors(_flink_deployment()) == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_resources_pass_the_strict_kubernetes_schemas(version: str) -> None:
    errors = {
        f"{r['kind']}/{r['metadata']['name']}": _kubernetes_error(r, version)
        for r in _kubernetes_resources()
    }
    assert {k: v for k, v in errors.items() if v} == {}


def _set(path: str, value: Any) -> Any:
    """A mutation: sets the value at a dotted path (list indices as numbers) of a resource."""

    def apply(resource: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = resource
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(last) if isinstance(node, list) else last] = value

    return apply


#: Deliberate breaks of the FlinkDeployment that the CRD must reject: (what, mutation, message).
CRD_BREAKS = [
    # what the 1.15.0 API server answered to the former manifest
    ("flinkVersion v2_3", _set("spec.flinkVersion", "v2_3"), "is not one of"),
    ("wrong enum: mode", _set("spec.mode", "standalone-ish"), "is not one of"),
    ("wrong enum: upgradeMode", _set("spec.job.upgradeMode", "savepoints"), "is not one of"),
    ("unknown field", _set("spec.taskManager.replica", 4), "Additional properties"),
    ("unknown field in the pod template",
     _set("spec.podTemplate.spec.containers.0.securityContext.privilegd", True),
     "Additional properties"),
    ("wrong type: replicas", _set("spec.jobManager.replicas", "1"), "is not of type"),
    ("wrong type: args", _set("spec.job.args", "--stoker.job-name stoker"), "is not of type"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "mutate", "message"), CRD_BREAKS, ids=[b[0] for b in CRD_BREAKS])
def test_the_crd_check_rejects_deliberate_breaks(what: str, mutate: Any, message: str) -> None:
    fd = copy.deepcopy(_flink_deployment())
    mutate(fd)
    errors = _crd_errors(fd)
    assert errors and any(message in e for e in errors), (what, errors)


#: Deliberate breaks of built-in resources the Kubernetes schemas must reject: (kind, what,
#: mutation, message). Kubernetes' OpenAPI schemas carry no enums for field values (the API
#: server's own Go validation checks those: hostPath types, imagePullPolicy...), only for
#: apiVersion and kind; an unknown kind has no schema.
KUBERNETES_BREAKS = [
    ("StatefulSet", "unknown field",
     _set("spec.template.spec.containers.0.volumeMount", []), "Additional properties"),
    ("StatefulSet", "wrong type: replicas", _set("spec.replicas", "2"), "is not of type"),
    ("StatefulSet", "wrong type: containerPort",
     _set("spec.template.spec.containers.0.ports.0.containerPort", "7070"), "is not of type"),
    ("Service", "wrong type: publishNotReadyAddresses",
     _set("spec.publishNotReadyAddresses", "true"), "is not of type"),
    ("Pod", "unknown field in a hostPath", _set("spec.volumes.0.hostPath.kind", "Directory"),
     "Additional properties"),
    ("Namespace", "unknown kind", _set("kind", "Namespaces"), "Couldn't find schema"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "what", "mutate", "message"), KUBERNETES_BREAKS, ids=[b[1] for b in KUBERNETES_BREAKS]
)
def test_the_kubernetes_check_rejects_deliberate_breaks(
    kind: str, what: str, mutate: Any, message: str
) -> None:
    (resource,) = [
        r for r in _kubernetes_resources() if r["kind"] == kind and "pod-template" not in str(r)
    ]
    assert _kubernetes_error(resource, KUBERNETES_VERSIONS[-1]) is None
    mutate(resource)
    try:
        error = _kubernetes_error(resource, KUBERNETES_VERSIONS[-1])
    except kubernetes_validate.SchemaNotFoundError as e:
        error = e.message
    assert error and message in error, (what, error)


# --- Shared memory between an edge TaskManager and the trainer pods of its node ---------------

#: The official Flink image's user flink (groupadd --gid=9999, useradd --uid=9999 in
#: apache/flink-docker's Dockerfiles), which the sink's files belong to.
FLINK_UID = 9999

#: Per Qwen-VL preset: (patch_size, temporal_patch_size, merge_size) (docs/parity.md).
PRESET_VISION = {"qwen2-vl": (14, 2, 2), "qwen2.5-vl": (14, 2, 2), "qwen3-vl": (16, 2, 2)}
PRESET_MAX_SEQ_LEN = {"qwen2-vl": 32768, "qwen2.5-vl": 128000, "qwen3-vl": 262144}
PIXEL_BYTES = {"FLOAT32": 4, "BFLOAT16": 2, "UINT8": 1}


def _trainer() -> dict[str, Any]:
    with open(EXAMPLE_TRAINER) as f:
        pod: dict[str, Any] = yaml.safe_load(f)
    return pod


def _shm_mount(pod_spec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The container's mount of the node's /dev/shm hostPath, with the volume."""
    host_paths = {v["name"]: v["hostPath"] for v in pod_spec["volumes"] if "hostPath" in v}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] in host_paths]
    env = {e["name"]: e.get("valueFrom", e.get("value")) for e in container.get("env", [])}
    # subPathExpr $(POD_NAMESPACE): the namespace's own directory of the node's /dev/shm/stoker
    assert mount["subPathExpr"] == "$(POD_NAMESPACE)", mount
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    return {**mount, "hostPath": host_paths[mount["name"]]}


def test_shared_memory_contract_same_directory_per_namespace_and_job_same_uid() -> None:
    edge = _edge()["spec"]["template"]["spec"]
    trainer = _trainer()["spec"]
    edge_mount = _shm_mount(edge, _edge_container())
    (trainer_container,) = trainer["containers"]
    trainer_mount = _shm_mount(trainer, trainer_container)
    # the same directory of the node
    assert edge_mount["hostPath"]["path"] == trainer_mount["hostPath"]["path"] == "/dev/shm/stoker"
    assert (
        edge_mount["hostPath"]["type"] == trainer_mount["hostPath"]["type"] == "DirectoryOrCreate"
    )
    # the job writes <output root>/<job-name>: the trainer's --root, one directory per job on a
    # node: (namespace, FlinkDeployment name) is unique in a cluster
    args = _job_args()
    assert args["stoker.output.root"] == edge_mount["mountPath"]
    assert args["stoker.job-name"] == _flink_deployment()["metadata"]["name"]
    command = trainer_container["command"]
    root = command[command.index("--root") + 1]
    assert root == f"{trainer_mount['mountPath']}/{args['stoker.job-name']}"
    # one uid and gid: the sink's files are rw------- and the reader writes ack.json and deletes
    for pod in (edge, trainer, _flink_deployment()["spec"]["podTemplate"]["spec"]):
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
            FLINK_UID,
            FLINK_UID,
        )
    # the trainer of node rank n runs where stoker-edge-<n> runs
    (term,) = trainer["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "statefulset.kubernetes.io/pod-name": f"{_edge()['metadata']['name']}-0"
    }
    # the kubelet creates the namespace's directory as root: the init container hands it over,
    # owner-only, mounted the same way
    (init,) = edge["initContainers"]
    init_mount = _shm_mount(edge, init)
    assert init_mount["mountPath"] == edge_mount["mountPath"]
    path, owner = init_mount["mountPath"], f"{FLINK_UID}:{FLINK_UID}"
    assert init["command"][-1] == (
        f'[ "$(stat -c %u:%g {path})" = {owner} ] || '
        f"{{ chmod 0700 {path} && chown {owner} {path}; }}"
    )


@pytest.mark.parametrize("owner", ["0:0", "9999:9999"])
def test_the_init_container_hands_the_directory_over_once(tmp_path: Path, owner: str) -> None:
    """Its command, run as written: a root-owned directory is chmod-ed and chown-ed, one owned
    by 9999 already is left alone (a restarted pod's root without FOWNER could not chmod it)."""
    (init,) = _edge()["spec"]["template"]["spec"]["initContainers"]
    path = _shm_mount(_edge()["spec"]["template"]["spec"], init)["mountPath"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool, body in {
        "stat": f'echo "{owner}"',
        "chmod": f'echo "chmod $*" >> {calls}',
        "chown": f'echo "chown $*" >> {calls}',
    }.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    result = subprocess.run(
        [*init["command"][:2], init["command"][2]],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    done = calls.read_text().splitlines() if calls.exists() else []
    if owner == "0:0":
        assert done == [f"chmod 0700 {path}", f"chown {FLINK_UID}:{FLINK_UID} {path}"]
    else:
        assert done == []


def _batch_file_bound(args: dict[str, str]) -> int:
    """The largest batch file the job's args allow, in bytes (batch-schema.json's columns)."""
    preset = args.get("stoker.model.preset", "qwen2-vl")
    patch, temporal, merge = PRESET_VISION[preset]
    rows = int(args["stoker.micro-batch-size"])
    tokens = int(
        args.get(
            "stoker.packing.max-tokens",
            args.get("stoker.max-seq-len", PRESET_MAX_SEQ_LEN[preset]),
        )
    )
    # input_ids, labels, attention_mask: int64 per token; packed rows add 4 position ids
    per_token = 3 * 8 + (4 * 8 if "stoker.packing.max-tokens" in args else 0)
    # a token can be an image token: merge^2 patches of 3 x temporal x patch^2 values
    dtype = args.get("stoker.image.pixel-dtype", "FLOAT32").upper()
    per_token += merge * merge * 3 * temporal * patch * patch * PIXEL_BYTES[dtype]
    # grids, sources, locations, cu_seqlens, the Arrow schema and footer
    return rows * tokens * per_token + (1 << 20)


def _assert_batch_files_reserved(args: dict[str, str], container: dict[str, Any]) -> None:
    ranks = int(_edge_env()["STOKER_RANKS_PER_NODE"])
    depth = int(args.get("stoker.prefetch-depth", "8"))
    assert depth > 0, "prefetch depth 0 is unbounded: no memory can be reserved"
    # depth batches per rank, and one more being written beside its staged slots
    bound = ranks * (depth + 1) * _batch_file_bound(args)
    memory = container["resources"]
    request = _quantity_bytes(memory["requests"]["memory"])
    assert _quantity_bytes(memory["limits"]["memory"]) == request, "request and limit differ"
    process = _flink_bytes(str(_edge_env()["STOKER_EDGE_PROCESS_SIZE"]))
    reserved = request - process
    assert reserved >= bound, f"{reserved} bytes reserved for batch files < their bound {bound}"
    assert reserved <= bound * 1.05, f"{reserved} bytes reserved, far beyond the bound {bound}"


def test_shared_memory_contract_batch_files_are_reserved_where_they_are_charged() -> None:
    """The edge pod writes the batch files, so its cgroup is charged: request = JVM + bound."""
    _assert_batch_files_reserved(_job_args(), _edge_container())


@pytest.mark.parametrize(
    "change",
    [
        {"stoker.prefetch-depth": "8"},
        {"stoker.image.pixel-dtype": "FLOAT32"},
        {"stoker.max-seq-len": None},
        {"stoker.micro-batch-size": "8"},
        {"stoker.prefetch-depth": "0"},
    ],
    ids=["deeper prefetch", "float32 pixels", "preset max-seq-len", "larger batches", "unbounded"],
)
def test_batch_file_reservation_check_fails_on_deliberate_breaks(change: dict[str, Any]) -> None:
    args = {k: v for k, v in {**_job_args(), **change}.items() if v is not None}
    with pytest.raises(AssertionError):
        _assert_batch_files_reserved(args, _edge_container())


def _pod_security_findings(pod: dict[str, Any]) -> set[str]:
    """What of a pod spec the Pod Security "restricted" level does not allow (its rules in brief)."""
    findings = set()
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            findings.add(flag)
    findings |= {f"hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v}
    pod_context = pod.get("securityContext", {})
    if pod_context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
        findings.add("no seccomp profile")
    for c in pod.get("initContainers", []) + pod.get("containers", []):
        context = c.get("securityContext", {})
        merged = {**pod_context, **context}
        name = c["name"]
        if context.get("privileged"):
            findings.add(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            findings.add(f"{name}: privilege escalation")
        if not merged.get("runAsNonRoot") or merged.get("runAsUser") == 0:
            findings.add(f"{name}: runs as root")
        caps = context.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            findings.add(f"{name}: capabilities not dropped")
        findings |= {f"{name}: adds {a}" for a in caps.get("add", []) if a != "NET_BIND_SERVICE"}
    return findings


def test_pods_have_the_least_privilege_that_works() -> None:
    # the hostPath (the node's shared memory) and the init container that hands it to uid 9999
    assert _pod_security_findings(_edge()["spec"]["template"]["spec"]) == {
        "hostPath volume node-shm",
        "shm-dir: runs as root",
        "shm-dir: adds CHOWN",
    }
    assert _pod_security_findings(_trainer()["spec"]) == {"hostPath volume node-shm"}
    assert _pod_security_findings(_flink_deployment()["spec"]["podTemplate"]["spec"]) == set()


@pytest.mark.parametrize(
    ("mutate", "finding"),
    [
        (_set("containers.0.securityContext.privileged", True), "taskmanager: privileged"),
        (_set("containers.0.securityContext.capabilities", {}), "taskmanager: capabilities not"),
        (_set("containers.0.securityContext.runAsUser", 0), "taskmanager: runs as root"),
        (_set("containers.0.securityContext.allowPrivilegeEscalation", True), "escalation"),
        (_set("hostNetwork", True), "hostNetwork"),
        (_set("securityContext.seccompProfile", {"type": "Unconfined"}), "no seccomp profile"),
    ],
    ids=["privileged", "capabilities", "root", "escalation", "hostNetwork", "seccomp"],
)
def test_the_privilege_check_catches_deliberate_breaks(mutate: Any, finding: str) -> None:
    pod = copy.deepcopy(_edge()["spec"]["template"]["spec"])
    mutate(pod)
    assert any(finding in f for f in _pod_security_findings(pod))


# --- S3: credentials from a Secret (or workload identity), endpoint and region as options ------


def test_s3_credentials_come_from_the_secret_and_endpoint_and_region_are_options() -> None:
    secret_env = {
        name: {"secretKeyRef": {"name": "stoker-s3", "key": name, "optional": True}}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    pod_template = _flink_deployment()["spec"]["podTemplate"]["spec"]
    (main,) = pod_template["containers"]
    assert main["name"] == "flink-main-container"  # the operator's name, merged into its pods
    for container in (main, _edge_container()):
        env = {e["name"]: e.get("valueFrom", e.get("value")) for e in container["env"]}
        assert {k: env.get(k) for k in secret_env} == secret_env, container["name"]
    # never a key in the config or the args (both are visible in the web UI and ConfigMaps)
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    args = _job_args()
    assert not [k for k in {**conf, **args} if "access-key" in k or "secret-key" in k]
    # HA storage, checkpoints and savepoints on S3 through the endpoint; the images too
    for key in ("high-availability.storageDir", "execution.checkpointing.dir"):
        assert conf[key].startswith("s3://"), key
    endpoint = conf["s3.endpoint"]
    region = args["stoker.s3.region"]
    aws = re.fullmatch(r"https://s3\.([a-z0-9-]+)\.amazonaws\.com", endpoint)
    assert aws is None or aws.group(1) == region, (endpoint, region)
