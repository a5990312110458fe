package dev.stoker.job;

import dev.stoker.connectors.protocol.Ack;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.HexFormat;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.configuration.StateRecoveryOptions;

/**
 * What a submission of the job produces: a fresh generation stamp for its shared-memory files and
 * the step it starts after.
 *
 * <p>Every submission (fresh, or restored from a savepoint) gets a new generation; a failover
 * within the job keeps it, because the stamp is fixed in the job graph when the job is planned.
 */
final class Generation {
    private static final DateTimeFormatter STAMP =
            DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss").withZone(ZoneOffset.UTC);

    final String stamp;
    final long resumeStep;

    /** Whether the submission restores a savepoint ({@code flink run -s}). */
    final boolean fromSavepoint;

    private Generation(String stamp, long resumeStep, boolean fromSavepoint) {
        this.stamp = stamp;
        this.resumeStep = resumeStep;
        this.fromSavepoint = fromSavepoint;
    }

    /** First step this generation produces. */
    long firstStep() {
        return resumeStep + 1;
    }

    /**
     * The resume step is {@code stoker.resume-step} if set; otherwise, when the job is restored
     * from a savepoint, the last step every rank acknowledged in the previous generation's shared
     * memory (the trainer went on from there); otherwise -1.
     *
     * @param env the execution environment's configuration ({@code flink run -s} sets the savepoint
     *     path there)
     */
    static Generation plan(Configuration conf, ReadableConfig env) {
        long resume = -1;
        boolean fromSavepoint =
                conf.getOptional(StateRecoveryOptions.SAVEPOINT_PATH).isPresent()
                        || env.getOptional(StateRecoveryOptions.SAVEPOINT_PATH).isPresent();
        if (conf.contains(StokerOptions.RESUME_STEP)) {
            resume = conf.get(StokerOptions.RESUME_STEP);
        } else if (fromSavepoint) {
            resume = Ack.lastStepConsumedByAllRanks(Path.of(StokerConfig.jobDir(conf))).orElse(-1L);
        }
        byte[] random = new byte[3];
        new SecureRandom().nextBytes(random);
        String stamp =
                STAMP.format(ZonedDateTime.now(ZoneOffset.UTC))
                        + "-"
                        + HexFormat.of().formatHex(random);
        return new Generation(stamp, resume, fromSavepoint);
    }
}
