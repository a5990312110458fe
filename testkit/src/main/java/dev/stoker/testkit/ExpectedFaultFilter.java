package dev.stoker.testkit;

import org.apache.logging.log4j.core.Filter;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.config.Node;
import org.apache.logging.log4j.core.config.plugins.Plugin;
import org.apache.logging.log4j.core.config.plugins.PluginAttribute;
import org.apache.logging.log4j.core.config.plugins.PluginFactory;
import org.apache.logging.log4j.core.filter.AbstractFilter;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A log4j 2 filter ({@code filter.x.type = ExpectedFaults} in a {@code log4j2-test.properties})
 * that matches the log lines of faults a test injects on purpose, so the tests' console shows a
 * real WARN or stack trace and sends these to the full log file only. An event is an expected fault
 * when:
 *
 * <ul>
 *   <li>its message, or the message of an exception in its cause chain, contains {@link
 *       FaultInjectingBlobStore#INJECTED} (a reset or cancelled body of the local S3 server);
 *   <li>an exception in its cause chain is Flink's {@code FlinkExpectedException} (Flink's own mark
 *       for expected failures, e.g. "The TaskExecutor is shutting down" after a test kills a
 *       MiniCluster TaskManager);
 *   <li>it is a {@code Dead letter: ...} line of Stoker's dead-letter accounting while a test class
 *       that registers {@link DeadLettersExpected} runs: one that feeds bad records on purpose and
 *       asserts each dead letter it gets.
 * </ul>
 *
 * Matched events get {@code onMatch} (default DENY), others {@code onMismatch} (default NEUTRAL).
 */
@Plugin(
        name = "ExpectedFaults",
        category = Node.CATEGORY,
        elementType = Filter.ELEMENT_TYPE,
        printObject = true)
public final class ExpectedFaultFilter extends AbstractFilter {
    private static final String FLINK_EXPECTED = "org.apache.flink.util.FlinkExpectedException";
    private static final String DEAD_LETTER_LOGGER =
            "dev.stoker.operators.accounting.DeadLetterAccounting";
    private static final int MAX_CAUSES = 32;
    private static volatile boolean deadLettersExpected;

    private ExpectedFaultFilter(Result onMatch, Result onMismatch) {
        super(onMatch, onMismatch);
    }

    /**
     * The filter, from a log4j configuration.
     *
     * @param onMatch result for an expected fault, default DENY
     * @param onMismatch result for any other event, default NEUTRAL
     */
    @PluginFactory
    public static ExpectedFaultFilter createFilter(
            @PluginAttribute("onMatch") Result onMatch,
            @PluginAttribute("onMismatch") Result onMismatch) {
        return new ExpectedFaultFilter(
                onMatch == null ? Result.DENY : onMatch,
                onMismatch == null ? Result.NEUTRAL : onMismatch);
    }

    @Override
    public Result filter(LogEvent event) {
        return isExpected(
                        event.getLoggerName(),
                        event.getMessage().getFormattedMessage(),
                        event.getThrown())
                ? onMatch
                : onMismatch;
    }

    static boolean isExpected(String logger, String message, Throwable thrown) {
        if (message != null && message.contains(FaultInjectingBlobStore.INJECTED)) {
            return true;
        }
        if (deadLettersExpected
                && DEAD_LETTER_LOGGER.equals(logger)
                && message != null
                && message.startsWith("Dead letter: ")) {
            return true;
        }
        Throwable t = thrown;
        for (int i = 0; t != null && i < MAX_CAUSES; i++, t = t.getCause()) {
            if (FLINK_EXPECTED.equals(t.getClass().getName())
                    || (t.getMessage() != null
                            && t.getMessage().contains(FaultInjectingBlobStore.INJECTED))) {
                return true;
            }
        }
        return false;
    }

    /**
     * JUnit 5 extension for a test class that feeds bad records on purpose and asserts the dead
     * letters it gets ({@code @ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class)}): while
     * it runs, its {@code Dead letter: ...} lines are expected faults. Test classes run one after
     * another in a test JVM (no parallel execution configured).
     */
    public static final class DeadLettersExpected implements BeforeAllCallback, AfterAllCallback {
        @Override
        public void beforeAll(ExtensionContext context) {
            deadLettersExpected = true;
        }

        @Override
        public void afterAll(ExtensionContext context) {
            deadLettersExpected = false;
        }
    }
}
