"""The job's command lines, built in one place: the embedded run (``java ... StokerJob``, JobManager
and TaskManager in one JVM) and the arguments of ``flink run`` for a cluster.

``./stoker demo`` (:mod:`stoker_tools.demo`), the benchmarks and the Python tests start the job
through these functions, so its JVM flags, classpath and options are spelled once:

* the jar and its classpath file come from the Maven build (``mvn package``): ``$STOKER_JAR``
  (default ``job/target/stoker-job.jar``) and ``$STOKER_CLASSPATH_FILE`` (default
  ``job/target/runtime-classpath.txt``, one ``:``-separated line);
* the ``--add-opens`` flags are the java launcher argument file :data:`JVM_OPENS_FILE`
  (``flink-conf/jvm-opens.args``), passed as ``@<file>``, which Surefire and Failsafe pass too;
* job options are a mapping ``{key: value}`` written as ``--key value`` (Flink reads the last of
  a repeated key, so a later entry of the mapping is the one that counts).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The Stoker checkout this module is in (``python/stoker_tools/job.py``).
REPO = Path(__file__).resolve().parents[2]
#: The java launcher argument file with the ``--add-opens`` flags Arrow and Flink need on Java 17.
JVM_OPENS_FILE = REPO / "flink-conf" / "jvm-opens.args"
#: The job's entry point.
MAIN_CLASS = "dev.stoker.job.StokerJob"
#: The embedded job's JVM (JobManager and TaskManager in one) uses the Parallel collector: the
#: image work allocates and drops arrays of hundreds of KB to tens of MB per image and has no
#: pause-time target; measured +8-9% samples/s over the default G1 (bench/README.md). Its young
#: generation is capped at 256 MB: left alone the collector grew it to 1.7 GB of eden for ~150-190
#: MB that survive a collection, which made the process 1.0-1.4 GiB larger (PSS) for no
#: throughput the side-by-side runs resolve (bench/README.md, "Young generation of the embedded
#: JVM"); the old generation, where large images go, keeps the JVM's default limit (a quarter of
#: the RAM). Without the AWS SDK v1 banner of the S3 filesystem plugin.
EMBEDDED_JVM_OPTS = (
    "-XX:+UseParallelGC",
    "-XX:MaxNewSize=256m",
    "-Daws.java.v1.disableDeprecationAnnouncement=true",
)


class JobBuildMissing(FileNotFoundError):
    """The job jar or its classpath file is missing (the message names both and how to build)."""


@dataclass(frozen=True)
class JobBuild:
    """What ``mvn package`` leaves to start the job with: the shaded jar and its run-time
    classpath file."""

    jar: Path
    classpath_file: Path

    @classmethod
    def from_env(cls, repo: Path = REPO) -> JobBuild:
        """``$STOKER_JAR`` and ``$STOKER_CLASSPATH_FILE``, by default the build's in ``repo``."""
        return cls(
            Path(os.environ.get("STOKER_JAR", repo / "job" / "target" / "stoker-job.jar")),
            Path(
                os.environ.get(
                    "STOKER_CLASSPATH_FILE", repo / "job" / "target" / "runtime-classpath.txt"
                )
            ),
        )

    def check(self) -> JobBuild:
        """This build, if both files exist.

        Raises:
            JobBuildMissing: either is missing.
        """
        if not self.jar.is_file() or not self.classpath_file.is_file():
            raise JobBuildMissing(
                f"the job jar ({self.jar}) or its classpath file ({self.classpath_file}) is "
                "missing: build them with mvn package (./stoker demo and ./stoker test do)"
            )
        return self

    def classpath(self) -> str:
        """``jar:<the classpath file's line>``, for ``java -cp``."""
        return f"{self.jar}:{self.classpath_file.read_text().strip()}"


def option_args(options: Mapping[str, str]) -> list[str]:
    """``{key: value}`` -> ``["--key", "value", ...]`` in the mapping's order."""
    return [x for key, value in options.items() for x in (f"--{key}", value)]


def embedded_command(
    options: Mapping[str, str],
    *,
    build: JobBuild | None = None,
    jvm_opts: Iterable[str] = (),
    log_file: Path | None = None,
) -> list[str]:
    """The command line of the job on embedded Flink with ``options``.

    ``java @flink-conf/jvm-opens.args [jvm_opts] [logging] -cp <jar:classpath> StokerJob --key
    value ...``. ``build`` defaults to :meth:`JobBuild.from_env`. With ``log_file`` the job logs
    there through ``flink-conf/log4j-console.properties`` (Flink's file log plus WARN on the
    console); without, Flink's default console logging.

    Raises:
        JobBuildMissing: the jar or its classpath file is missing.
    """
    build = (build or JobBuild.from_env()).check()
    logging = (
        [
            f"-Dlog.file={log_file}",
            f"-Dlog4j.configurationFile=file:{REPO / 'flink-conf' / 'log4j-console.properties'}",
        ]
        if log_file is not None
        else []
    )
    return [
        "java",
        f"@{JVM_OPENS_FILE}",
        *jvm_opts,
        *logging,
        "-cp",
        build.classpath(),
        MAIN_CLASS,
        *option_args(options),
    ]


def flink_run_args(
    options: Mapping[str, str], *flink_args: str, jar: Path | None = None
) -> list[str]:
    """The arguments of Flink's CLI that submit the job with ``options``: ``run [flink_args]
    <jar> --key value ...`` (``flink_args``: e.g. ``-d``, ``-s <savepoint>``, ``-p 3``). ``jar``
    defaults to :meth:`JobBuild.from_env`'s; it is not checked here (the CLI names a missing one).
    """
    jar = jar if jar is not None else JobBuild.from_env().jar
    return ["run", *flink_args, str(jar), *option_args(options)]
