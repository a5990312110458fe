package dev.stoker.job;

import static com.tngtech.archunit.base.DescribedPredicate.not;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideInAPackage;
import static com.tngtech.archunit.core.domain.properties.HasName.Predicates.name;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.classes;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.junit.AnalyzeClasses;
import com.tngtech.archunit.junit.ArchTest;
import com.tngtech.archunit.lang.ArchRule;

/**
 * Layering of the main code (docs/development.md, "Architecture rules"): {@code operators} (domain)
 * <- {@code connectors} (I/O) <- {@code job} (wiring); inside connectors, the source and the
 * shared-memory sink both depend on the batch protocol ({@code connectors.protocol}) and not on
 * each other. Lives in the job module because its test classpath holds all three modules' classes.
 */
@AnalyzeClasses(packages = "dev.stoker", importOptions = ImportOption.DoNotIncludeTests.class)
class ArchitectureTest {

    @ArchTest
    static final ArchRule OPERATORS_ARE_THE_BOTTOM_LAYER =
            noClasses()
                    .that()
                    .resideInAPackage("dev.stoker.operators..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAnyPackage("dev.stoker.connectors..", "dev.stoker.job..")
                    .because(
                            "operators is the bottom layer (domain model, pure transforms): move"
                                    + " the shared type down into operators, or the code up into"
                                    + " connectors/job");

    @ArchTest
    static final ArchRule CONNECTORS_DO_NOT_DEPEND_ON_THE_JOB =
            noClasses()
                    .that()
                    .resideInAPackage("dev.stoker.connectors..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAPackage("dev.stoker.job..")
                    .because(
                            "connectors speak the domain's types (operators); wiring and options"
                                    + " belong to job: pass values in through constructors");

    @ArchTest
    static final ArchRule SOURCE_AND_SINK_MEET_ONLY_IN_THE_PROTOCOL =
            noClasses()
                    .that()
                    .resideInAPackage("dev.stoker.connectors.source..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAPackage("dev.stoker.connectors.shm..")
                    .orShould()
                    .dependOnClassesThat()
                    .resideInAPackage("dev.stoker.connectors.fetch..")
                    .because(
                            "the source and the shared-memory sink talk only through the batch"
                                    + " protocol's files: what both need (layout, manifest, ack)"
                                    + " belongs in dev.stoker.connectors.protocol");

    @ArchTest
    static final ArchRule THE_SINK_DOES_NOT_DEPEND_ON_THE_SOURCE =
            noClasses()
                    .that()
                    .resideInAPackage("dev.stoker.connectors.shm..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAnyPackage(
                            "dev.stoker.connectors.source..", "dev.stoker.connectors.fetch..")
                    .because(
                            "the sink reads the trainer's feedback through the protocol package"
                                    + " (Ack), not through the source's prefetch gate");

    @ArchTest
    static final ArchRule THE_PROTOCOL_IS_THE_BOTTOM_OF_CONNECTORS =
            noClasses()
                    .that()
                    .resideInAPackage("dev.stoker.connectors.protocol..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAnyPackage(
                            "dev.stoker.connectors.source..",
                            "dev.stoker.connectors.shm..",
                            "dev.stoker.connectors.fetch..",
                            "dev.stoker.connectors.deadletter..")
                    .because(
                            "dev.stoker.connectors.protocol is the batch protocol both sides of"
                                    + " the files depend on (docs/batch-protocol.md); it depends on"
                                    + " no connector");

    @ArchTest
    static final ArchRule THE_FEEDBACK_SITS_ON_THE_PROTOCOL =
            noClasses()
                    .that()
                    .resideInAPackage("dev.stoker.connectors.feedback..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAnyPackage(
                            "dev.stoker.connectors.source..",
                            "dev.stoker.connectors.shm..",
                            "dev.stoker.connectors.fetch..",
                            "dev.stoker.connectors.deadletter..")
                    .because(
                            "the acks' way from the ranks' nodes to the gate (files, HTTP) is shared by"
                                    + " the source (which polls) and the sink (which serves): it"
                                    + " depends on the protocol only");

    @ArchTest
    static final ArchRule SOURCE_AND_SINK_USE_THE_PROTOCOL =
            classes()
                    .that()
                    .haveSimpleName("LocalAckFeed")
                    .or()
                    .haveSimpleName("AckServer")
                    .or()
                    .haveSimpleName("RankPublisher")
                    .should()
                    .dependOnClassesThat()
                    .resideInAPackage("dev.stoker.connectors.protocol..")
                    .because(
                            "the prefetch gate's feeds and the sinks' batch publisher read the acks"
                                    + " through the protocol package's Ack");

    @ArchTest
    static final ArchRule THE_TESTKIT_IS_FOR_TESTS_ONLY =
            noClasses()
                    .that()
                    .resideInAnyPackage(
                            "dev.stoker.operators..", "dev.stoker.connectors..", "dev.stoker.job..")
                    .should()
                    .dependOnClassesThat()
                    .resideInAPackage("dev.stoker.testkit..")
                    .because(
                            "the testkit (local S3 server, fault injection) is a test dependency and"
                                    + " never in the job jar");

    @ArchTest
    static final ArchRule NO_PACKAGE_CYCLES =
            slices().matching("dev.stoker.(**)")
                    .should()
                    .beFreeOfCycles()
                    .because(
                            "package cycles make layers impossible to split: move the type both"
                                    + " packages need into the lower one");

    @ArchTest
    static final ArchRule JACKSON_ONLY_THROUGH_THE_JOBS_BUFFER_POOL =
            noClasses()
                    .that()
                    .resideOutsideOfPackage("dev.stoker.operators.json..")
                    .should()
                    .callConstructor("com.fasterxml.jackson.databind.ObjectMapper")
                    .orShould()
                    .callConstructor("com.fasterxml.jackson.databind.json.JsonMapper")
                    .orShould()
                    .callConstructor("com.fasterxml.jackson.core.JsonFactory")
                    .orShould()
                    .callConstructor("com.fasterxml.jackson.core.JsonFactoryBuilder")
                    .orShould()
                    .callMethod("com.fasterxml.jackson.core.JsonFactory", "builder")
                    .orShould()
                    .callMethod("com.fasterxml.jackson.databind.json.JsonMapper", "builder")
                    .orShould()
                    .callMethod("com.fasterxml.jackson.databind.JsonNode", "toString")
                    .orShould()
                    .callMethod("com.fasterxml.jackson.databind.JsonNode", "toPrettyString")
                    .because(
                            "Jackson's default buffer pool is a ThreadLocal: JSON read on a thread"
                                    + " Flink keeps (a gauge on flink-metrics-N) would keep the"
                                    + " finished job's class loader in the TaskManager; make"
                                    + " factories and mappers with dev.stoker.operators.json.Json"
                                    + " (JsonNode.toString() uses a default mapper of Jackson's:"
                                    + " write nodes with a Json mapper)");

    @ArchTest
    static final ArchRule NO_FLINK_RUNTIME_INTERNALS =
            noClasses()
                    .should()
                    .dependOnClassesThat(
                            resideInAPackage("org.apache.flink.runtime..")
                                    .and(
                                            not(
                                                    name(
                                                            "org.apache.flink.runtime.execution"
                                                                    + ".SuppressRestartsException"))))
                    .because(
                            "org.apache.flink.runtime.. is Flink's internal runtime, not a public"
                                    + " API: use the DataStream / connector / configuration APIs"
                                    + " (org.apache.flink.api.., streaming.api.., configuration..,"
                                    + " util..). The one exception: SuppressRestartsException,"
                                    + " the only way a task can say its failure is permanent (a"
                                    + " missing tokenizer file) so the job fails instead of"
                                    + " restarting forever; Flink 2.3 has no public equivalent");
}
