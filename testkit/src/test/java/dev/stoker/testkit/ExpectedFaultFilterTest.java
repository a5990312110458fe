package dev.stoker.testkit;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import org.apache.flink.runtime.rpc.exceptions.RecipientUnreachableException;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.Filter.Result;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.impl.Log4jLogEvent;
import org.apache.logging.log4j.message.SimpleMessage;
import org.junit.jupiter.api.Test;

class ExpectedFaultFilterTest {
    private static final String DEAD_LETTERS =
            "dev.stoker.operators.accounting.DeadLetterAccounting";
    private final ExpectedFaultFilter filter = ExpectedFaultFilter.createFilter(null, null);

    private static LogEvent event(String logger, String message, Throwable thrown) {
        return Log4jLogEvent.newBuilder()
                .setLoggerName(logger)
                .setLevel(Level.WARN)
                .setMessage(new SimpleMessage(message))
                .setThrown(thrown)
                .build();
    }

    @Test
    void anInjectedBodyFaultIsExpectedInTheMessageOrAnywhereInTheCauses() {
        IOException injected =
                new IOException(FaultInjectingBlobStore.INJECTED + "connection reset");
        assertThat(filter.filter(event("jetty", "handleException /b/k " + injected, null)))
                .isEqualTo(Result.DENY);
        assertThat(
                        filter.filter(
                                event(
                                        "task",
                                        "switched from RUNNING to FAILED",
                                        new RuntimeException("wrapped", injected))))
                .isEqualTo(Result.DENY);
    }

    /** What Flink's JobMaster RPC actor logs when a runnable of its main thread throws. */
    private static LogEvent mainThreadFailure(String exceptionMessage) {
        return event(
                "org.apache.flink.runtime.rpc.pekko.FencedPekkoRpcActor",
                "Caught exception while executing runnable in main thread.",
                new IllegalStateException(exceptionMessage));
    }

    @Test
    void flinksAbortOfAnUnseenCheckpointIsExpectedButNotAnotherMainThreadFailure() {
        assertThat(
                        filter.filter(
                                mainThreadFailure(
                                        "Trying to open gateway for unseen checkpoint: latest"
                                                + " known checkpoint = 17, incoming checkpoint = 18")))
                .isEqualTo(Result.DENY);
        assertThat(filter.filter(mainThreadFailure("Trying to open gateway for checkpoint 18")))
                .isEqualTo(Result.NEUTRAL);
    }

    @Test
    void aSlotOfferToAStoppedJobMasterIsExpectedButNotAnotherCause() {
        String taskExecutor = "org.apache.flink.runtime.taskexecutor.TaskExecutor";
        String message =
                "Slot offering to JobManager failed. Freeing the slots and returning them to the"
                        + " ResourceManager.";
        assertThat(
                        filter.filter(
                                event(
                                        taskExecutor,
                                        message,
                                        new RecipientUnreachableException(
                                                "sender", "jobmanager_38", "offerSlots"))))
                .isEqualTo(Result.DENY);
        assertThat(filter.filter(event(taskExecutor, message, new IOException("timeout"))))
                .isEqualTo(Result.NEUTRAL);
        assertThat(
                        filter.filter(
                                event(
                                        "other",
                                        message,
                                        new RecipientUnreachableException(
                                                "sender", "jobmanager_38", "offerSlots"))))
                .isEqualTo(Result.NEUTRAL);
    }

    @Test
    void theSameFaultWithoutTheMarkIsARealOne() {
        assertThat(
                        filter.filter(
                                event(
                                        "task",
                                        "switched from RUNNING to FAILED",
                                        new RuntimeException(
                                                "wrapped", new IOException("connection reset")))))
                .isEqualTo(Result.NEUTRAL);
        assertThat(filter.filter(event("jetty", "injected", null))).isEqualTo(Result.NEUTRAL);
    }

    @Test
    void deadLettersAreExpectedOnlyWhileATestClassSaysSo() {
        LogEvent deadLetter =
                event(DEAD_LETTERS, "Dead letter: f.jsonl:3 (id=r2): FETCH/...", null);
        ExpectedFaultFilter.DeadLettersExpected extension =
                new ExpectedFaultFilter.DeadLettersExpected();
        assertThat(filter.filter(deadLetter)).isEqualTo(Result.NEUTRAL);
        extension.beforeAll(null);
        try {
            assertThat(filter.filter(deadLetter)).isEqualTo(Result.DENY);
            // another logger's line, or another line of that logger, stays
            assertThat(filter.filter(event("other", "Dead letter: x", null)))
                    .isEqualTo(Result.NEUTRAL);
            assertThat(filter.filter(event(DEAD_LETTERS, "something else", null)))
                    .isEqualTo(Result.NEUTRAL);
        } finally {
            extension.afterAll(null);
        }
        assertThat(filter.filter(deadLetter)).isEqualTo(Result.NEUTRAL);
    }

    @Test
    void expectedLinesMatchLoggerMessageAndCauseOnlyWhileTheirClassRuns() {
        ExpectedFaultFilter.Expected failover =
                ExpectedFaultFilter.Expected.lines(
                                "task", "Source: .* switched from RUNNING to FAILED.*")
                        .causedBy(IllegalStateException.class.getName());
        LogEvent expected =
                event(
                        "task",
                        "Source: jsonl-source (1/2) switched from RUNNING to FAILED with cause:",
                        new RuntimeException("wrapped", new IllegalStateException("on purpose")));
        assertThat(filter.filter(expected)).isEqualTo(Result.NEUTRAL);
        failover.beforeAll(null);
        try {
            assertThat(filter.filter(expected)).isEqualTo(Result.DENY);
            // another cause, another logger or another message is a real one
            assertThat(
                            filter.filter(
                                    event(
                                            "task",
                                            "Source: x switched from RUNNING to FAILED",
                                            new RuntimeException("other"))))
                    .isEqualTo(Result.NEUTRAL);
            assertThat(
                            filter.filter(
                                    event(
                                            "other",
                                            "Source: x switched from RUNNING to FAILED",
                                            new IllegalStateException())))
                    .isEqualTo(Result.NEUTRAL);
            assertThat(
                            filter.filter(
                                    event(
                                            "task",
                                            "Sink: x switched from RUNNING to FAILED",
                                            new IllegalStateException())))
                    .isEqualTo(Result.NEUTRAL);
        } finally {
            failover.afterAll(null);
        }
        assertThat(filter.filter(expected)).isEqualTo(Result.NEUTRAL);
    }

    @Test
    void theLocalS3ServersListingRaceIsExpectedAsS3ProxyAndJettyLogIt() {
        java.nio.file.FileSystemException race =
                new java.nio.file.FileSystemException(
                        "/tmp/s3/sft/checkpoints/chk-2/_metadata-1: Unable to get size of extended"
                                + " attribute 'user.content-md5': No data available");
        assertThat(
                        filter.filter(
                                event(
                                        "org.gaul.s3proxy.nio2blob.AbstractNio2BlobStore",
                                        "unexpected exception",
                                        race)))
                .isEqualTo(Result.DENY);
        assertThat(
                        filter.filter(
                                event(
                                        "org.gaul.shaded.org.eclipse.jetty.server.HttpChannel",
                                        "handleException /sft " + race,
                                        null)))
                .isEqualTo(Result.DENY);
        assertThat(
                        filter.filter(
                                event(
                                        "org.gaul.s3proxy.nio2blob.AbstractNio2BlobStore",
                                        "unexpected exception",
                                        new java.nio.file.FileSystemException("disk full"))))
                .isEqualTo(Result.NEUTRAL);
    }
}
