package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.accounting.Accounting;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.RejectReason;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The operator guide's "Watch" table (docs/operator-guide.md) names REST metric ids that the
 * cluster tests read from running jobs; every group and metric name in them must be one the code
 * registers, i.e. a constant of {@link MetricNames} or {@link Accounting}, so that renaming a
 * metric in the code without the guide fails here and not only in a cluster test.
 */
class MetricsReferenceTest {
    /** A REST id's segment that stands for a value: a rank, a source name, a reason. */
    private static final Pattern PLACEHOLDER = Pattern.compile("<[a-zA-Z]+>");

    /** Flink's histogram statistics, appended to a histogram's name with an underscore. */
    private static final Pattern HISTOGRAM_STATISTIC =
            Pattern.compile("_(p50|p75|p95|p98|p99|p999|min|max|mean|stddev|count)$");

    @Test
    void everyMetricIdOfTheOperatorGuideIsMadeOfRegisteredNames() throws Exception {
        Set<String> declared = declaredNames();
        List<String> ids = OperatorGuide.watchTableMetricIds();
        assertThat(ids).as("REST ids in the operator guide's Watch table").hasSizeGreaterThan(10);
        for (String id : ids) {
            String[] segments = id.substring(id.indexOf('.') + 1).split("\\.");
            for (String segment : segments) {
                String name = HISTOGRAM_STATISTIC.matcher(segment).replaceFirst("");
                if (PLACEHOLDER.matcher(name).matches() || isReason(name)) {
                    continue;
                }
                assertThat(declared).as("'%s' of the documented id %s", name, id).contains(name);
            }
        }
    }

    @Test
    void theNamesAreDistinctWithinEachOperator() throws Exception {
        for (Class<?> operator : MetricNames.class.getDeclaredClasses()) {
            List<String> names = constants(operator);
            assertThat(new HashSet<>(names)).as(operator.getSimpleName()).hasSize(names.size());
        }
    }

    private static boolean isReason(String segment) {
        for (RejectReason r : RejectReason.values()) {
            if (r.name().equals(segment)) {
                return true;
            }
        }
        return false;
    }

    private static Set<String> declaredNames() throws Exception {
        Set<String> names = new HashSet<>(constants(Accounting.class));
        for (Class<?> operator : MetricNames.class.getDeclaredClasses()) {
            names.addAll(constants(operator));
        }
        return names;
    }

    private static List<String> constants(Class<?> holder) throws IllegalAccessException {
        List<String> values = new ArrayList<>();
        for (Field f : holder.getDeclaredFields()) {
            int mod = f.getModifiers();
            if (Modifier.isStatic(mod) && Modifier.isPublic(mod) && f.getType() == String.class) {
                values.add((String) f.get(null));
            }
        }
        return values;
    }
}
