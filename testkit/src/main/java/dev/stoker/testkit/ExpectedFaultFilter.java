package dev.stoker.testkit;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Predicate;
import java.util.regex.Pattern;
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
 *   <li>its message, or an exception's in its cause chain, is the local S3 server's listing race
 *       ({@link #S3PROXY_LIST_RACE});
 *   <li>it is one of Flink's known races ({@link #FLINK_UNSEEN_CHECKPOINT_ABORT}, {@link
 *       #FLINK_SLOT_OFFER_TO_STOPPED_JOB_MASTER});
 *   <li>an exception in its cause chain is Flink's {@code FlinkExpectedException} (Flink's own mark
 *       for expected failures, e.g. "The TaskExecutor is shutting down" after a test kills a
 *       MiniCluster TaskManager);
 *   <li>it is a {@code Dead letter: ...} line of Stoker's dead-letter accounting while a test class
 *       that registers {@link DeadLettersExpected} runs: one that feeds bad records on purpose and
 *       asserts each dead letter it gets;
 *   <li>it matches an {@link Expected} line a running test class registered (logger, message
 *       pattern and, optionally, an exception in the cause chain): a warning the test causes on
 *       purpose, such as the failure of a task it makes fail.
 * </ul>
 *
 * <p>Tests log to the console through this filter, and to {@code
 * target/console-unexpected-<unit|it>.log} through it with WARN as the threshold; the build fails
 * when that file exists (the root pom's enforcer execution {@code console-clean}), so a WARN or
 * stack trace on the tests' console is always one no test expects.
 *
 * <p>Matched events get {@code onMatch} (default DENY), others {@code onMismatch} (default
 * NEUTRAL).
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

    /**
     * The local S3 server's race (S3Proxy 2.6.0's filesystem store): a LIST that meets a file
     * another request is still writing, before S3Proxy has set its MD5 attribute, fails with this
     * (S3Proxy logs it at ERROR, its Jetty at WARN; the client retries the LIST). Seen when Flink
     * lists a checkpoint directory while writing {@code _metadata}; never a Stoker fault.
     */
    static final String S3PROXY_LIST_RACE =
            "Unable to get size of extended attribute 'user.content-md5'";

    /**
     * Flink 2.3's race at a checkpoint aborted before its operator coordinators were asked to take
     * it (a task that is finishing declines it first): the JobMaster's {@code
     * OperatorCoordinatorHolder#notifyCheckpointAborted} opens the subtask gateways for that
     * checkpoint, {@code SubtaskGatewayImpl} throws this {@code IllegalStateException} and {@code
     * FencedPekkoRpcActor} logs it at ERROR; the job goes on (seen in {@code BadInputsITCase} on
     * 2026-12-03). Never a Stoker fault.
     */
    static final String FLINK_UNSEEN_CHECKPOINT_ABORT =
            "Trying to open gateway for unseen checkpoint: ";

    /**
     * Flink 2.3's race at a job's end: a TaskExecutor offers slots to the job's JobMaster just as
     * that JobMaster stops (the job finished, was cancelled or stopped with a savepoint), the RPC
     * fails with {@code RecipientUnreachableException} and the TaskExecutor logs this WARN and
     * frees the slots (seen in the job module's ITs in CI on 2026-12-03). Never a Stoker fault: a
     * JobMaster lost while its job runs fails that job, which a test sees.
     */
    static final Expected FLINK_SLOT_OFFER_TO_STOPPED_JOB_MASTER =
            Expected.lines(
                            "org.apache.flink.runtime.taskexecutor.TaskExecutor",
                            "Slot offering to JobManager failed\\. Freeing the slots and returning"
                                    + " them to the ResourceManager\\.")
                    .causedBy(
                            "org.apache.flink.runtime.rpc.exceptions.RecipientUnreachableException");

    private static volatile boolean deadLettersExpected;
    private static final List<Expected> EXPECTED = new CopyOnWriteArrayList<>();

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
        if (isKnownFault(message)
                || FLINK_SLOT_OFFER_TO_STOPPED_JOB_MASTER.matches(logger, message, thrown)) {
            return true;
        }
        if (deadLettersExpected
                && DEAD_LETTER_LOGGER.equals(logger)
                && message != null
                && message.startsWith("Dead letter: ")) {
            return true;
        }
        for (Expected e : EXPECTED) {
            if (e.matches(logger, message, thrown)) {
                return true;
            }
        }
        return anyCause(
                thrown,
                t -> FLINK_EXPECTED.equals(t.getClass().getName()) || isKnownFault(t.getMessage()));
    }

    /**
     * An injected fault of the local S3 server, its listing race, or Flink's aborted-checkpoint
     * race.
     */
    private static boolean isKnownFault(String message) {
        return message != null
                && (message.contains(FaultInjectingBlobStore.INJECTED)
                        || message.contains(S3PROXY_LIST_RACE)
                        || message.startsWith(FLINK_UNSEEN_CHECKPOINT_ABORT));
    }

    /**
     * Whether {@code thrown} or one of its first {@value #MAX_CAUSES} causes satisfies {@code
     * test}.
     */
    private static boolean anyCause(Throwable thrown, Predicate<Throwable> test) {
        Throwable t = thrown;
        for (int i = 0; t != null && i < MAX_CAUSES; i++, t = t.getCause()) {
            if (test.test(t)) {
                return true;
            }
        }
        return false;
    }

    /**
     * JUnit 5 extension ({@code @RegisterExtension static final ExpectedFaultFilter.Expected x =
     * ExpectedFaultFilter.Expected.lines(...)}) for a test class that causes a WARN or ERROR on
     * purpose: while the class runs, events of the logger whose whole message matches the pattern
     * (and, with {@link #causedBy}, whose cause chain holds that exception class) are expected
     * faults. Name the narrowest logger and message: anything else stays on the console.
     */
    public static final class Expected implements BeforeAllCallback, AfterAllCallback {
        private final String logger;
        private final Pattern message;
        private final String cause;

        private Expected(String logger, Pattern message, String cause) {
            this.logger = logger;
            this.message = message;
            this.cause = cause;
        }

        /**
         * @param logger the logger's full name (a class name)
         * @param messageRegex a regular expression the whole formatted message must match
         */
        public static Expected lines(String logger, String messageRegex) {
            return new Expected(logger, Pattern.compile(messageRegex, Pattern.DOTALL), null);
        }

        /**
         * Flink's warning that a task of the job's source chain ({@code Source: jsonl-source ->
         * ...}) failed, with its stack trace, when {@code causeClass} (full name) is in its cause
         * chain: for a test that fails a task on purpose.
         */
        public static Expected sourceTaskFailures(String causeClass) {
            return lines(
                            "org.apache.flink.runtime.taskmanager.Task",
                            "Source: jsonl-source -> .* switched from \\w+ to FAILED .*")
                    .causedBy(causeClass);
        }

        /**
         * The AWS SDK Netty client's warning that a cancelled request's {@code IOException("Request
         * cancelled")} reached the end of its channel pipeline: for a test whose GETs are cancelled
         * (the SDK's attempt timeout under throttling, the job's fetch timeout, a failed-over
         * task).
         */
        public static Expected cancelledS3Gets() {
            return lines(
                            "io.netty.channel.DefaultChannelPipeline",
                            "An exceptionCaught\\(\\) event was fired, and it reached at the tail of the"
                                    + " pipeline\\..*")
                    .causedBy("java.io.IOException");
        }

        /**
         * RemoteAckFeed's warning, once per GPU node, that a node's ack server stopped answering:
         * for a test that stops ack servers (or the TaskManager that runs them) on purpose.
         */
        public static Expected ackServersNotAnswering() {
            return lines(
                    "dev.stoker.connectors.feedback.RemoteAckFeed",
                    "Acks of node \\d+ \\(.*\\) did not answer \\(.*\\); its ranks keep their last known"
                            + " steps until it does");
        }

        /**
         * The same lines, only when an exception of class {@code className} (full name) is in the
         * event's cause chain.
         */
        public Expected causedBy(String className) {
            return new Expected(logger, message, className);
        }

        boolean matches(String eventLogger, String eventMessage, Throwable thrown) {
            if (!logger.equals(eventLogger)
                    || eventMessage == null
                    || !message.matcher(eventMessage).matches()) {
                return false;
            }
            return cause == null || anyCause(thrown, t -> cause.equals(t.getClass().getName()));
        }

        @Override
        public void beforeAll(ExtensionContext context) {
            EXPECTED.add(this);
        }

        @Override
        public void afterAll(ExtensionContext context) {
            EXPECTED.remove(this);
        }
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
