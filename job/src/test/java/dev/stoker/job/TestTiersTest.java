package dev.stoker.job;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.classes;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;

import com.tngtech.archunit.core.domain.JavaClass;
import com.tngtech.archunit.core.domain.JavaMethodCall;
import com.tngtech.archunit.core.importer.Location;
import com.tngtech.archunit.junit.AnalyzeClasses;
import com.tngtech.archunit.junit.ArchTest;
import com.tngtech.archunit.junit.LocationProvider;
import com.tngtech.archunit.lang.ArchCondition;
import com.tngtech.archunit.lang.ArchRule;
import com.tngtech.archunit.lang.ConditionEvents;
import com.tngtech.archunit.lang.SimpleConditionEvent;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * Test tiers (docs/development.md, "Architecture rules"): unit tests are {@code *Test} (surefire)
 * and start no Flink cluster; tests that run a MiniCluster or a real server are {@code *ITCase}
 * (failsafe). Checks the test classes of all three modules (their {@code target/test-classes},
 * built earlier in the reactor).
 */
@AnalyzeClasses(locations = TestTiersTest.AllModulesTestClasses.class)
class TestTiersTest {

    private static final List<String> TEST_ANNOTATIONS =
            List.of(
                    "org.junit.jupiter.api.Test",
                    "org.junit.jupiter.api.RepeatedTest",
                    "org.junit.jupiter.api.TestFactory",
                    "org.junit.jupiter.api.TestTemplate",
                    "org.junit.jupiter.params.ParameterizedTest",
                    "com.code_intelligence.jazzer.junit.FuzzTest",
                    "com.tngtech.archunit.junit.ArchTest");

    @ArchTest
    static final ArchRule TEST_CLASSES_ARE_NAMED_BY_TIER =
            classes()
                    .should(beNamedAfterTheirTier())
                    .because(
                            "surefire runs only *Test and failsafe only *ITCase: any other name is"
                                    + " never run. Rename it to *Test (unit) or *ITCase"
                                    + " (MiniCluster, real files end to end, servers)");

    @ArchTest
    static final ArchRule UNIT_TESTS_START_NO_MINI_CLUSTER =
            classes()
                    .should(notStartAMiniClusterWhenNamedTest())
                    .because(
                            "a *Test is a unit test run by surefire; a test that starts a Flink"
                                    + " MiniCluster (MiniClusterExtension, env.execute(), or a"
                                    + " helper that does) is an integration test: rename it to"
                                    + " *ITCase");

    @ArchTest
    static final ArchRule TESTS_ARE_JUNIT_5 =
            noClasses()
                    .should()
                    .dependOnClassesThat()
                    .resideInAnyPackage("org.junit", "org.junit.rules", "org.junit.runner..")
                    .because(
                            "JUnit 4 tests are never run (no vintage engine): use"
                                    + " org.junit.jupiter.api.Test and JUnit 5 extensions");

    /** The top-level class (the one the test runner sees) of a possibly nested class. */
    private static JavaClass topLevel(JavaClass c) {
        JavaClass top = c;
        for (Optional<JavaClass> e = c.getEnclosingClass();
                e.isPresent();
                e = top.getEnclosingClass()) {
            top = e.get();
        }
        return top;
    }

    private static boolean hasTestMethods(JavaClass c) {
        return c.getMethods().stream()
                        .anyMatch(m -> TEST_ANNOTATIONS.stream().anyMatch(m::isAnnotatedWith))
                || c.getFields().stream()
                        .anyMatch(f -> TEST_ANNOTATIONS.stream().anyMatch(f::isAnnotatedWith));
    }

    private static ArchCondition<JavaClass> beNamedAfterTheirTier() {
        return new ArchCondition<>("be named *Test or *ITCase when they hold tests") {
            @Override
            public void check(JavaClass c, ConditionEvents events) {
                if (!hasTestMethods(c)) {
                    return; // helpers (fixtures, test data) may have any name
                }
                String name = topLevel(c).getSimpleName();
                boolean ok = name.endsWith("Test") || name.endsWith("ITCase");
                events.add(
                        new SimpleConditionEvent(
                                c,
                                ok,
                                c.getName()
                                        + " has test methods but its name ends neither in Test"
                                        + " nor in ITCase"));
            }
        };
    }

    /** Why {@code c} itself starts (or registers) a MiniCluster, if it does. */
    private static Optional<String> startsMiniCluster(JavaClass c) {
        Optional<String> miniCluster =
                c.getDirectDependenciesFromSelf().stream()
                        .map(d -> d.getTargetClass())
                        .filter(
                                t ->
                                        t.getName().startsWith("org.apache.flink.")
                                                && (t.getSimpleName().contains("MiniCluster")
                                                        || t.getSimpleName()
                                                                .equals("LocalStreamEnvironment")))
                        .map(t -> "uses " + t.getName())
                        .findFirst();
        if (miniCluster.isPresent()) {
            return miniCluster;
        }
        for (JavaMethodCall call : c.getMethodCallsFromSelf()) {
            String name = call.getName();
            if (call.getTargetOwner()
                            .isAssignableTo(
                                    "org.apache.flink.streaming.api.environment"
                                            + ".StreamExecutionEnvironment")
                    && (name.startsWith("execute") || name.startsWith("createLocalEnvironment"))) {
                return Optional.of(
                        "calls StreamExecutionEnvironment." + name + " (a local MiniCluster)");
            }
        }
        return Optional.empty();
    }

    private static ArchCondition<JavaClass> notStartAMiniClusterWhenNamedTest() {
        return new ArchCondition<>("not start a MiniCluster when named *Test") {
            @Override
            public void check(JavaClass c, ConditionEvents events) {
                if (!topLevel(c).getSimpleName().endsWith("Test")) {
                    return;
                }
                Optional<String> why = startsMiniCluster(c);
                if (why.isEmpty()) {
                    // One level into our own test helpers (e.g. JobRun runs the whole job).
                    for (var d : c.getDirectDependenciesFromSelf()) {
                        JavaClass t = d.getTargetClass();
                        if (t.getPackageName().startsWith("dev.stoker")
                                && !topLevel(t).equals(topLevel(c))) {
                            Optional<String> helper = startsMiniCluster(t);
                            if (helper.isPresent()) {
                                why =
                                        Optional.of(
                                                "uses " + t.getName() + ", which " + helper.get());
                                break;
                            }
                        }
                    }
                }
                events.add(
                        new SimpleConditionEvent(
                                c,
                                why.isEmpty(),
                                c.getName() + " is a *Test but " + why.orElse("starts nothing")));
            }
        };
    }

    /** The compiled test classes of operators, connectors and job. */
    static final class AllModulesTestClasses implements LocationProvider {
        @Override
        public Set<Location> get(Class<?> testClass) {
            Path job = Path.of("").toAbsolutePath();
            Set<Location> out = new LinkedHashSet<>();
            for (String module : List.of("operators", "connectors", "job")) {
                Path dir = job.resolveSibling(module).resolve("target/test-classes");
                if (!Files.isDirectory(dir)) {
                    throw new IllegalStateException(
                            dir
                                    + " is missing: run the build from the repository root"
                                    + " (mvn verify) so every module's tests are compiled");
                }
                out.add(Location.of(dir));
            }
            return out;
        }
    }
}
