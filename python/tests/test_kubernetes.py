"""The Kubernetes layout in ``deploy/kubernetes/`` holds what the placement design depends on.

``docs/multi-node.md`` measured (``PlacementITCase``) that each GPU node's sinks stay on that node's
edge TaskManager when only that TaskManager declares the external resource ``stoker-node-<n>``,
the CPU TaskManagers declare ``stoker-cpu``, and the default scheduler runs. These tests parse
every manifest and check those facts against independent sources, not against the manifests
themselves:

* Flink config keys added for Kubernetes exist in Flink 2.3: they are looked up as string constants
  of the ``org.apache.flink.configuration`` classes in the ``flink-core`` jar that the Maven build
  resolves (``~/.m2``; ``./stoker test`` runs Maven before pytest);
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
  its arguments) for several pod names, and the resource it declares is derived from the ordinal.

No Kubernetes cluster is involved: what these tests cannot show is that the operator and the
kubelet accept the manifests (docs/multi-node.md says what is not run).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S = REPO_ROOT / "deploy" / "kubernetes"
FLINK_CONF = REPO_ROOT / "flink-conf" / "config.yaml"
STOKER_OPTIONS = (
    REPO_ROOT / "job" / "src" / "main" / "java" / "dev" / "stoker" / "job" / "StokerOptions.java"
)
SCRIPT = K8S / "edge-taskmanager.sh"
FLINK_HOME = Path(os.environ.get("STOKER_FLINK_HOME", REPO_ROOT / "cluster" / "target" / "flink"))

#: What the edge pod's memory limit holds beyond the JVM: the batch files in /dev/shm, charged to
#: the pod's memory cgroup (edge-taskmanagers.yaml).
BATCH_FILES_BYTES = 16 << 30

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


def _flink_core_constants() -> set[str]:
    """String constants of Flink's ConfigOption classes, from the flink-core jar the build uses."""
    version = re.search(
        r"<flink\.version>([^<]+)</flink\.version>", (REPO_ROOT / "pom.xml").read_text()
    )
    assert version, "no flink.version in pom.xml"
    v = version.group(1)
    jar = (
        Path.home()
        / ".m2"
        / "repository"
        / "org"
        / "apache"
        / "flink"
        / "flink-core"
        / v
        / f"flink-core-{v}.jar"
    )
    assert jar.is_file(), (
        f"{jar} is missing: build once with Maven (mvn -q -pl job -am package -DskipTests)"
    )
    strings: set[str] = set()
    with zipfile.ZipFile(jar) as z:
        for n in z.namelist():
            if n.startswith("org/apache/flink/configuration/") and n.endswith("Options.class"):
                strings.update(
                    s.decode("ascii") for s in re.findall(rb"[\x21-\x7e]{3,}", z.read(n))
                )
    return strings


def _assert_flink_keys_exist(keys: set[str], where: str) -> None:
    constants = _flink_core_constants()
    # ExternalResourceOptions builds external-resource.<name>.amount from these two constants.
    assert {"external-resource", "amount"} <= constants
    unknown = {
        k
        for k in keys
        if k not in constants and not re.fullmatch(r"external-resource\.[a-z0-9-]+\.amount", k)
    }
    assert not unknown, (
        f"{where}: keys that are no ConfigOption of Flink's flink-core: {sorted(unknown)}"
    )


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
    assert manifests == ["edge-taskmanagers.yaml", "flinkdeployment.yaml", "kustomization.yaml"]
    for name in manifests:
        for doc in _load(name):
            assert doc["apiVersion"] and doc["kind"], f"{name}: a document without apiVersion/kind"
    kustomization = _one("kustomization.yaml", "Kustomization")
    assert sorted(kustomization["resources"]) == ["edge-taskmanagers.yaml", "flinkdeployment.yaml"]
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
    flink_version = re.search(
        r"<flink\.version>(\d+)\.(\d+)\.", (REPO_ROOT / "pom.xml").read_text()
    )
    assert flink_version
    assert spec["flinkVersion"] == f"v{flink_version.group(1)}_{flink_version.group(2)}"
    conf = spec["flinkConfiguration"]
    # The operator's CRD types this map as strings; a YAML number or boolean is a mistake.
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
    # Keys beyond the production config must be Flink 2.3 options: Flink ignores unknown keys.
    _assert_flink_keys_exist(added, "flinkConfiguration")


def test_cpu_taskmanagers_declare_only_stoker_cpu() -> None:
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    assert conf["external-resources"] == "stoker-cpu"
    assert int(conf["external-resource.stoker-cpu.amount"]) >= 1
    assert not [k for k in conf if "stoker-node" in k or "stoker-node" in conf[k]]


@pytest.mark.parametrize("ordinal", [0, 1, 11])
def test_edge_start_script_declares_the_resource_of_its_ordinal(
    tmp_path: Path, ordinal: int
) -> None:
    ranks = str(_edge_env()["STOKER_RANKS_PER_NODE"])
    pod = f"{_edge()['metadata']['name']}-{ordinal}"
    result = _run_script(tmp_path, pod, ranks)
    assert result.returncode == 0, result.stderr
    props = _dynamic_properties(result.stdout.splitlines())
    node = f"stoker-node-{ordinal}"
    assert props == {
        "external-resources": node,
        f"external-resource.{node}.amount": ranks,
        "taskmanager.numberOfTaskSlots": ranks,
        "taskmanager.memory.process.size": str(_edge_env()["STOKER_EDGE_PROCESS_SIZE"]),
        "taskmanager.resource-id": pod,
    }
    _assert_flink_keys_exist(set(props), SCRIPT.name)


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
    # The node's /dev/shm (shared with the trainer pod) is where the job writes its batches.
    output_root = _job_args()["stoker.output.root"]
    assert volumes["node-shm"]["hostPath"]["path"] == output_root == mounts["node-shm"]
    assert output_root.startswith("/dev/shm/")
    (init,) = spec["initContainers"]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {output_root}
    assert (
        f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']} {output_root}"
        in init["command"][-1]
    )
    # The memory request is the JVM's process size; the limit holds the JVM and the batch files
    # it writes to tmpfs (charged to it).
    process = _flink_bytes(str(_edge_env()["STOKER_EDGE_PROCESS_SIZE"]))
    memory = container["resources"]
    assert _quantity_bytes(memory["requests"]["memory"]) == process
    assert _quantity_bytes(memory["limits"]["memory"]) == process + BATCH_FILES_BYTES
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
