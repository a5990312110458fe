package dev.stoker.job;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.junit.AnalyzeClasses;
import com.tngtech.archunit.junit.ArchTest;
import com.tngtech.archunit.lang.ArchRule;

/**
 * Layering of the main code (README "Architecture rules"): {@code operators} (domain) <- {@code
 * connectors} (I/O) <- {@code job} (wiring). Lives in the job module because its test classpath
 * holds all three modules' classes.
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
    static final ArchRule NO_FLINK_RUNTIME_INTERNALS =
            noClasses()
                    .should()
                    .dependOnClassesThat()
                    .resideInAPackage("org.apache.flink.runtime..")
                    .because(
                            "org.apache.flink.runtime.. is Flink's internal runtime, not a public"
                                    + " API: use the DataStream / connector / configuration APIs"
                                    + " (org.apache.flink.api.., streaming.api.., configuration..,"
                                    + " util..)");
}
