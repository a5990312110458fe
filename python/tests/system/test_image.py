"""The image of the Kubernetes layout (``deploy/image/``) holds what the manifests expect.

No container engine runs in CI, so the image is never built here. What can be checked without
one is checked against the Maven build's outputs (``./stoker test`` runs Maven before pytest):

* every file ``deploy/image/files.txt`` puts in the build context exists after the build, and the
  Dockerfile copies exactly the context's folders to where the manifests look for them;
* the base image is the official Flink image of the build's Flink version, on Java 17;
* the job jar's ``Main-Class`` is the job's entry point, and the class is in the jar;
* ``lib/`` is exactly the operator guide's "On your own cluster" list, byte for byte the
  artifacts Maven resolved (``~/.m2``);
* the plugins provide what ``flinkConfiguration`` names: the ``s3`` filesystem and the reporter
  factories;
* ``deploy/image/build.sh`` assembles that context and calls the engine (a stand-in that records
  what it was given), and refuses a missing tokenizer or engine with a message.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml
from harness.paths import REPO_ROOT

IMAGE = REPO_ROOT / "deploy" / "image"
DOCKERFILE = IMAGE / "Dockerfile"
FILES = IMAGE / "files.txt"
BUILD = IMAGE / "build.sh"
OPERATOR_GUIDE = REPO_ROOT / "docs" / "operator-guide.md"
FLINK_DEPLOYMENT = REPO_ROOT / "deploy" / "kubernetes" / "flinkdeployment.yaml"
M2 = Path.home() / ".m2" / "repository"


def _flink_version() -> str:
    m = re.search(r"<flink\.version>([^<]+)</flink\.version>", (REPO_ROOT / "pom.xml").read_text())
    assert m
    return m.group(1)


def _files(text: str) -> dict[str, str]:
    """files.txt: {path in the build context: path in the repository}."""
    pairs = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            src, dst = line.split()
            pairs[dst] = src
    return pairs


def _copies(text: str) -> dict[str, str]:
    """The Dockerfile's COPY instructions: {source in the context: destination in the image}."""
    copies = {}
    for line in text.splitlines():
        m = re.fullmatch(r"COPY (\S+) (\S+)", line.strip())
        if m:
            copies[m.group(1)] = m.group(2)
        else:
            assert not line.startswith("COPY"), f"a COPY this test cannot read: {line}"
    return copies


def _flink_deployment() -> dict:
    with open(FLINK_DEPLOYMENT) as f:
        (fd,) = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "FlinkDeployment"]
    return fd


def _job_arg(name: str) -> str:
    args = _flink_deployment()["spec"]["job"]["args"]
    return str(args[args.index(f"--{name}") + 1])


def _guide_lib() -> set[str]:
    """The operator guide's lib/ list, as group:artifact:version[:classifier]."""
    text = OPERATOR_GUIDE.read_text()
    start = text.index("**On your own cluster**")
    paragraph = text[start : text.index("\n\n", start)]
    coordinates = set(re.findall(r"`([\w.-]+:[\w.-]+:\d[\w.-]*(?::[\w-]+)?)`", paragraph))
    assert coordinates, "no group:artifact:version in the operator guide's lib/ paragraph"
    return coordinates


def image_problems(dockerfile: str, files_txt: str, guide_lib: set[str]) -> list[str]:
    """What would keep the image from building or from holding what the manifests expect."""
    problems = []
    m = re.search(r"^FROM (\S+)$", dockerfile, re.M)
    if not m or m.group(1) != f"flink:{_flink_version()}-java17":
        problems.append(f"FROM {m and m.group(1)}: not flink:{_flink_version()}-java17")
    files = _files(files_txt)
    problems += [
        f"{src} (for {dst}) is missing after the build"
        for dst, src in files.items()
        if not (REPO_ROOT / src).is_file()
    ]
    # the context: files.txt's folders, and the tokenizer build.sh adds
    context = {dst.split("/")[0] + "/" for dst in files} | {"tokenizer/"}
    copies = _copies(dockerfile)
    if set(copies) != context:
        problems.append(f"COPY sources {sorted(copies)} != the build context {sorted(context)}")
    tokenizer = _job_arg("stoker.tokenizer.path").rstrip("/") + "/"
    jar_uri = _flink_deployment()["spec"]["job"]["jarURI"]
    expected = {
        "lib/": "/opt/flink/lib/",
        "plugins/": "/opt/flink/plugins/",
        "usrlib/": "/opt/flink/usrlib/",
        "tokenizer/": tokenizer,
    }
    problems += [
        f"COPY {src} {dst}: expected {expected.get(src)}"
        for src, dst in copies.items()
        if expected.get(src) != dst
    ]
    if jar_uri != "local:///opt/flink/" + next((d for d in files if d.startswith("usrlib/")), "?"):
        problems.append(f"jarURI {jar_uri} is not the jar files.txt puts in usrlib/")
    # lib/: the operator guide's list, each the artifact Maven resolved
    lib = {Path(dst).name: src for dst, src in files.items() if dst.startswith("lib/")}
    for coordinate in sorted(guide_lib):
        group, artifact, version = coordinate.split(":")[:3]
        name = _jar_name(coordinate)
        resolved = M2 / group.replace(".", "/") / artifact / version / name
        if name not in lib:
            problems.append(f"{coordinate} of the operator guide is not in the image's lib/")
        elif not resolved.is_file() or (
            (REPO_ROOT / lib[name]).is_file()
            and _sha256(resolved) != _sha256(REPO_ROOT / lib[name])
        ):
            problems.append(f"{lib[name]} is not {coordinate} as Maven resolved it ({resolved})")
    extra = set(lib) - {_jar_name(c) for c in guide_lib}
    problems += [f"lib/{name} is not in the operator guide's list" for name in sorted(extra)]
    return problems


def _jar_name(coordinate: str) -> str:
    """Maven's file name of group:artifact:version[:classifier]."""
    _, artifact, version, *classifier = coordinate.split(":")
    return "-".join([artifact, version, *classifier]) + ".jar"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_image_definition_copies_what_the_build_makes_to_where_the_manifests_look() -> None:
    assert image_problems(DOCKERFILE.read_text(), FILES.read_text(), _guide_lib()) == []


@pytest.mark.parametrize(
    ("what", "dockerfile", "files_txt", "guide", "problem"),
    [
        ("older Flink", ("2.3.0-java17", "2.2.0-java17"), None, None, "FROM flink:2.2.0"),
        ("Java 11", ("-java17", "-java11"), None, None, "not flink:"),
        ("a COPY of a folder the context lacks", ("COPY usrlib/", "COPY opt/"), None, None,
         "COPY sources"),
        ("the jar elsewhere", ("/opt/flink/usrlib/", "/opt/flink/lib/"), None, None,
         "COPY usrlib/ /opt/flink/lib/"),
        ("a file the build does not make", None, ("jna-5.17.0.jar ", "jna-5.18.0.jar "), None,
         "is missing after the build"),
        ("a lib/ jar the guide does not list", None, None, "net.java.dev.jna:jna:5.17.0",
         "lib/jna-5.17.0.jar is not in the operator guide's list"),
        ("a guide jar the image lacks", None, None, "+org.example:extra:1.0",
         "org.example:extra:1.0 of the operator guide is not in the image's lib/"),
    ],
)  # fmt: skip
def test_the_image_check_catches_deliberate_breaks(
    what: str,
    dockerfile: tuple[str, str] | None,
    files_txt: tuple[str, str] | None,
    guide: str | None,
    problem: str,
) -> None:
    d, f, g = DOCKERFILE.read_text(), FILES.read_text(), _guide_lib()
    if dockerfile:
        assert dockerfile[0] in d
        d = d.replace(dockerfile[0], dockerfile[1], 1)
    if files_txt:
        assert files_txt[0] in f
        f = f.replace(files_txt[0], files_txt[1])
    if guide:
        g = g | {guide[1:]} if guide.startswith("+") else g - {guide}
    problems = image_problems(d, f, g)
    assert any(problem in p for p in problems), (what, problems)


def test_the_job_jar_starts_the_job() -> None:
    files = _files(FILES.read_text())
    (jar,) = [REPO_ROOT / src for dst, src in files.items() if dst.startswith("usrlib/")]
    m = re.search(r"<mainClass>([^<]+)</mainClass>", (REPO_ROOT / "job" / "pom.xml").read_text())
    assert m and m.group(1) == "dev.stoker.job.StokerJob"
    with zipfile.ZipFile(jar) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode()
        assert f"Main-Class: {m.group(1)}" in manifest.splitlines()
        assert m.group(1).replace(".", "/") + ".class" in z.namelist()


def test_the_plugins_provide_the_filesystem_and_reporters_the_configuration_names() -> None:
    files = _files(FILES.read_text())
    plugins = {dst: REPO_ROOT / src for dst, src in files.items() if dst.startswith("plugins/")}
    # each plugin in its own folder: Flink gives each folder its own class loader
    folders = [Path(dst).parent for dst in plugins]
    assert len(folders) == len(set(folders)) and all(len(f.parts) == 2 for f in folders)
    classes: set[str] = set()
    filesystems: set[str] = set()
    for path in plugins.values():
        with zipfile.ZipFile(path) as z:
            classes |= {n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class")}
            service = "META-INF/services/org.apache.flink.core.fs.FileSystemFactory"
            if service in z.namelist():
                filesystems |= set(z.read(service).decode().split())
    conf = _flink_deployment()["spec"]["flinkConfiguration"]
    # s3:// (checkpoints, savepoints, HA storage, the dataset): the presto S3 filesystem
    uses_s3 = [k for k, v in conf.items() if v.startswith("s3://")]
    assert uses_s3 and "org.apache.flink.fs.s3presto.S3FileSystemFactory" in filesystems
    reporters = [
        v for k, v in conf.items() if re.fullmatch(r"metrics\.reporter\.[^.]+\.factory\.class", k)
    ]
    assert reporters and all(r in classes for r in reporters), reporters


def _fake_engine(tmp_path: Path) -> Path:
    """A stand-in container engine: records its arguments and the build context's files."""
    engine = tmp_path / "bin" / "docker"
    engine.parent.mkdir()
    engine.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        'for ctx in "$@"; do :; done\n'
        f'(cd "$ctx" && find . -type f | sort) > {tmp_path}/context\n'
    )
    engine.chmod(0o755)
    return engine


def _tokenizer(tmp_path: Path) -> Path:
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    (tokenizer / "tokenizer_config.json").write_text("{}")
    return tokenizer


def test_build_script_assembles_the_context_and_calls_the_engine(tmp_path: Path) -> None:
    engine = _fake_engine(tmp_path)
    env = {"PATH": f"{engine.parent}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(BUILD), "--tokenizer", str(_tokenizer(tmp_path))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "args").read_text().split()
    image = _flink_deployment()["spec"]["image"]
    assert args[:5] == ["build", "--platform", "linux/amd64", "-t", image]
    context = set((tmp_path / "context").read_text().split())
    expected = {f"./{dst}" for dst in _files(FILES.read_text())}
    expected |= {"./Dockerfile", "./tokenizer/tokenizer.json", "./tokenizer/tokenizer_config.json"}
    assert context == expected


@pytest.mark.parametrize(
    ("tokenizer", "engine", "message"),
    [
        (False, True, "tokenizer.json is missing"),
        (True, False, "no container engine"),
    ],
)
def test_build_script_refuses_a_missing_tokenizer_or_engine(
    tmp_path: Path, tokenizer: bool, engine: bool, message: str
) -> None:
    path = f"{_fake_engine(tmp_path).parent}{os.pathsep}/usr/bin:/bin"
    # the engines it looks for: the stand-in "docker", or none that exists
    engines = "docker" if engine else "no-such-engine"
    folder = _tokenizer(tmp_path) if tokenizer else tmp_path / "none"
    result = subprocess.run(
        [str(BUILD), "--tokenizer", str(folder)],
        env={"PATH": path, "HOME": str(tmp_path), "STOKER_CONTAINER_ENGINES": engines},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert not (tmp_path / "args").exists()
