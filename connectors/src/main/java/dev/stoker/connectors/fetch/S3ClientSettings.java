package dev.stoker.connectors.fetch;

import java.io.Serializable;
import java.net.URI;
import java.time.Duration;
import java.util.List;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.awscore.retry.AwsRetryStrategy;
import software.amazon.awssdk.core.checksums.RequestChecksumCalculation;
import software.amazon.awssdk.core.checksums.ResponseChecksumValidation;
import software.amazon.awssdk.core.exception.ApiCallAttemptTimeoutException;
import software.amazon.awssdk.core.interceptor.ExecutionInterceptor;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.retries.api.BackoffStrategy;
import software.amazon.awssdk.retries.api.RetryStrategy;
import software.amazon.awssdk.services.s3.S3AsyncClient;

/**
 * How to reach S3 (or an S3-compatible server) and how hard to try: the settings of one {@link
 * S3AsyncClient} per fetch subtask. Serializable, so it travels inside the job graph.
 *
 * <p>Credentials: a configured access key / secret key pair is used as is; otherwise the AWS SDK's
 * default chain (environment, system properties, profile files, web identity, container and
 * instance metadata) is asked. The secret key never appears in {@link #toString()}.
 *
 * <p>Retries use the SDK's standard retry strategy (which retries throttling such as 503 SlowDown,
 * 5xx, I/O errors such as connection resets) plus per-attempt timeouts, with exponential backoff
 * and full jitter, at most {@code maxAttempts} attempts; 403 and 404 are never retried. The SDK's
 * retry circuit breaker (token bucket) is off so that every request gets its full attempt budget
 * under a burst of transient errors.
 *
 * <p>Immutable, built with {@link #builder()}: the job builds it from its {@code stoker.s3.*}
 * options, where the defaults are declared (once).
 */
public final class S3ClientSettings implements Serializable {
    private static final long serialVersionUID = 3L;

    private final String endpoint;
    private final String region;
    private final boolean pathStyleAccess;
    private final String accessKey;
    private final String secretKey;
    private final int maxConnections;
    private final Duration readTimeout;
    private final Duration attemptTimeout;
    private final Duration requestTimeout;
    private final int maxAttempts;
    private final Duration retryBaseDelay;
    private final Duration retryMaxDelay;
    private final double getsPerSecondPerPrefix;
    private final Duration hedgeAfter;

    private S3ClientSettings(Builder b) {
        endpoint = b.endpoint;
        region = required(b.region, "region");
        pathStyleAccess = b.pathStyleAccess;
        accessKey = b.accessKey;
        secretKey = b.secretKey;
        maxConnections = positive(b.maxConnections, "maxConnections");
        readTimeout = required(b.readTimeout, "readTimeout");
        if (readTimeout.toMillis() < 1) { // the Netty client counts whole ms; 0 turns it off
            throw new IllegalArgumentException(
                    "S3ClientSettings.readTimeout must be at least 1 ms, got " + readTimeout);
        }
        attemptTimeout = required(b.attemptTimeout, "attemptTimeout");
        requestTimeout = required(b.requestTimeout, "requestTimeout");
        maxAttempts = positive(b.maxAttempts, "maxAttempts");
        retryBaseDelay = required(b.retryBaseDelay, "retryBaseDelay");
        retryMaxDelay = required(b.retryMaxDelay, "retryMaxDelay");
        if (b.getsPerSecondPerPrefix == null || b.getsPerSecondPerPrefix < 0) {
            throw new IllegalArgumentException(
                    "S3ClientSettings.getsPerSecondPerPrefix must be set and >= 0, got "
                            + b.getsPerSecondPerPrefix);
        }
        getsPerSecondPerPrefix = b.getsPerSecondPerPrefix;
        hedgeAfter = required(b.hedgeAfter, "hedgeAfter");
    }

    /**
     * A builder with nothing set: every setting except the endpoint and the keys must be given (the
     * defaults live once, in the job's {@code stoker.s3.*} options).
     */
    public static Builder builder() {
        return new Builder();
    }

    /** A builder holding these settings, to change some. */
    public Builder toBuilder() {
        Builder b = new Builder();
        b.endpoint = endpoint;
        b.region = region;
        b.pathStyleAccess = pathStyleAccess;
        b.accessKey = accessKey;
        b.secretKey = secretKey;
        b.maxConnections = maxConnections;
        b.readTimeout = readTimeout;
        b.attemptTimeout = attemptTimeout;
        b.requestTimeout = requestTimeout;
        b.maxAttempts = maxAttempts;
        b.retryBaseDelay = retryBaseDelay;
        b.retryMaxDelay = retryMaxDelay;
        b.getsPerSecondPerPrefix = getsPerSecondPerPrefix;
        b.hedgeAfter = hedgeAfter;
        return b;
    }

    /** {@code http(s)://host:port} of an S3-compatible server; null for AWS's regional endpoint. */
    public String endpoint() {
        return endpoint;
    }

    /** AWS region name, e.g. {@code us-east-1}. */
    public String region() {
        return region;
    }

    /** Path-style addressing ({@code endpoint/bucket/key}) instead of virtual-host style. */
    public boolean pathStyleAccess() {
        return pathStyleAccess;
    }

    /** Access key id; null to use the default credential chain. */
    public String accessKey() {
        return accessKey;
    }

    /** Secret access key; null to use the default credential chain. Never logged. */
    public String secretKey() {
        return secretKey;
    }

    /**
     * HTTP connections per client: the most GETs (hedged ones included) it has on the wire at once.
     * {@link S3ImageStore} queues the GETs beyond it itself, so the client never makes a request
     * wait for a pooled connection while its timeouts run.
     */
    public int maxConnections() {
        return maxConnections;
    }

    /**
     * Longest silence of a connection while a request waits for its response or reads its body (the
     * Netty client's read timeout, at least 1 ms): an attempt that receives no byte for this long
     * fails with an {@code IOException} caused by Netty's {@code ReadTimeoutException} and is
     * retried, so a server that leaves a request unanswered costs this long instead of the attempt
     * timeout. The client reads only as fast as the body's consumer asks for more, so a consumer
     * that pauses this long (a spill file's writes stalled on a busy disk) ends the attempt too:
     * such requests go through a client of {@link #withReadTimeoutOfTheAttempt()}.
     */
    public Duration readTimeout() {
        return readTimeout;
    }

    /**
     * These settings with the read timeout raised to the attempt timeout (when it is shorter), so
     * that only the attempt timeout limits an attempt: for requests whose consumer may pause (video
     * bodies streamed into spill files) or whose first byte may legitimately take longer (the
     * start-up check's listings).
     */
    public S3ClientSettings withReadTimeoutOfTheAttempt() {
        return readTimeout.compareTo(attemptTimeout) >= 0
                ? this
                : toBuilder().readTimeout(attemptTimeout).build();
    }

    /** Time limit of one HTTP attempt (first byte to last byte); exceeded attempts are retried. */
    public Duration attemptTimeout() {
        return attemptTimeout;
    }

    /** Time limit of one GET including all its retries. */
    public Duration requestTimeout() {
        return requestTimeout;
    }

    /** Attempts per GET, the first one included (1 = no retry). */
    public int maxAttempts() {
        return maxAttempts;
    }

    /** Base delay of the exponential backoff (full jitter) between attempts. */
    public Duration retryBaseDelay() {
        return retryBaseDelay;
    }

    /** Upper bound of one backoff delay. */
    public Duration retryMaxDelay() {
        return retryMaxDelay;
    }

    /** Client-side GETs per second per key prefix (per subtask); 0 = no limit. */
    public double getsPerSecondPerPrefix() {
        return getsPerSecondPerPrefix;
    }

    /** Send a second GET for one still running after this long; zero = never (no hedging). */
    public Duration hedgeAfter() {
        return hedgeAfter;
    }

    /** The retry strategy described in the class comment. */
    public RetryStrategy retryStrategy() {
        BackoffStrategy backoff = BackoffStrategy.exponentialDelay(retryBaseDelay, retryMaxDelay);
        return AwsRetryStrategy.standardRetryStrategy().toBuilder()
                .maxAttempts(maxAttempts)
                .backoffStrategy(backoff)
                .throttlingBackoffStrategy(
                        BackoffStrategy.exponentialDelay(
                                retryBaseDelay.multipliedBy(5), retryMaxDelay))
                .retryOnExceptionOrCauseInstanceOf(ApiCallAttemptTimeoutException.class)
                .circuitBreakerEnabled(false)
                .build();
    }

    /** The credentials provider described in the class comment. */
    public AwsCredentialsProvider credentialsProvider() {
        if (accessKey != null && secretKey != null) {
            return StaticCredentialsProvider.create(
                    AwsBasicCredentials.create(accessKey, secretKey));
        }
        return DefaultCredentialsProvider.builder().build();
    }

    /**
     * Builds a client (Netty HTTP client with {@code maxConnections} connections). Checksums are
     * computed and validated only when S3 requires them, which S3-compatible servers such as
     * S3Proxy need and which costs nothing on AWS for plain GETs.
     *
     * @param interceptors SDK interceptors, e.g. for metrics
     */
    public S3AsyncClient createClient(List<ExecutionInterceptor> interceptors) {
        var builder =
                S3AsyncClient.builder()
                        .region(Region.of(region))
                        .forcePathStyle(pathStyleAccess)
                        .credentialsProvider(credentialsProvider())
                        .requestChecksumCalculation(RequestChecksumCalculation.WHEN_REQUIRED)
                        .responseChecksumValidation(ResponseChecksumValidation.WHEN_REQUIRED)
                        .httpClientBuilder(
                                NettyNioAsyncHttpClient.builder()
                                        .maxConcurrency(maxConnections)
                                        .readTimeout(readTimeout)
                                        // the store hands the client at most maxConnections GETs,
                                        // so this bounds only a leaked connection
                                        .connectionAcquisitionTimeout(requestTimeout))
                        .overrideConfiguration(
                                o -> {
                                    o.retryStrategy(retryStrategy())
                                            .apiCallAttemptTimeout(attemptTimeout)
                                            .apiCallTimeout(requestTimeout);
                                    interceptors.forEach(o::addExecutionInterceptor);
                                });
        if (endpoint != null && !endpoint.isEmpty()) {
            builder.endpointOverride(URI.create(endpoint));
        }
        return builder.build();
    }

    @Override
    public String toString() {
        return "S3ClientSettings{endpoint="
                + (endpoint == null ? "(AWS)" : endpoint)
                + ", region="
                + region
                + ", pathStyleAccess="
                + pathStyleAccess
                + ", credentials="
                + (accessKey != null && secretKey != null ? "static(****)" : "default chain")
                + ", maxConnections="
                + maxConnections
                + ", readTimeout="
                + readTimeout
                + ", attemptTimeout="
                + attemptTimeout
                + ", requestTimeout="
                + requestTimeout
                + ", maxAttempts="
                + maxAttempts
                + ", retryBaseDelay="
                + retryBaseDelay
                + ", retryMaxDelay="
                + retryMaxDelay
                + "}";
    }

    private static <T> T required(T value, String name) {
        if (value == null) {
            throw new IllegalArgumentException("S3ClientSettings." + name + " is not set");
        }
        return value;
    }

    private static int positive(Integer value, String name) {
        if (value == null || value < 1) {
            throw new IllegalArgumentException(
                    "S3ClientSettings." + name + " must be set and >= 1, got " + value);
        }
        return value;
    }

    /** Builds {@link S3ClientSettings}; {@link #build()} names the first setting left unset. */
    public static final class Builder {
        private String endpoint;
        private String region;
        private boolean pathStyleAccess;
        private String accessKey;
        private String secretKey;
        private Integer maxConnections;
        private Duration readTimeout;
        private Duration attemptTimeout;
        private Duration requestTimeout;
        private Integer maxAttempts;
        private Duration retryBaseDelay;
        private Duration retryMaxDelay;
        private Double getsPerSecondPerPrefix;
        private Duration hedgeAfter;

        private Builder() {}

        /** See {@link S3ClientSettings#endpoint()}; null or empty for AWS. */
        public Builder endpoint(String value) {
            endpoint = value;
            return this;
        }

        /** See {@link S3ClientSettings#region()}. */
        public Builder region(String value) {
            region = value;
            return this;
        }

        /** See {@link S3ClientSettings#pathStyleAccess()}. */
        public Builder pathStyleAccess(boolean value) {
            pathStyleAccess = value;
            return this;
        }

        /** Static credentials; both null for the default credential chain. */
        public Builder credentials(String accessKeyId, String secretAccessKey) {
            accessKey = accessKeyId;
            secretKey = secretAccessKey;
            return this;
        }

        /** See {@link S3ClientSettings#maxConnections()}. */
        public Builder maxConnections(int value) {
            maxConnections = value;
            return this;
        }

        /** See {@link S3ClientSettings#readTimeout()}. */
        public Builder readTimeout(Duration value) {
            readTimeout = value;
            return this;
        }

        /** See {@link S3ClientSettings#attemptTimeout()}. */
        public Builder attemptTimeout(Duration value) {
            attemptTimeout = value;
            return this;
        }

        /** See {@link S3ClientSettings#requestTimeout()}. */
        public Builder requestTimeout(Duration value) {
            requestTimeout = value;
            return this;
        }

        /** See {@link S3ClientSettings#maxAttempts()}. */
        public Builder maxAttempts(int value) {
            maxAttempts = value;
            return this;
        }

        /** See {@link S3ClientSettings#retryBaseDelay()}. */
        public Builder retryBaseDelay(Duration value) {
            retryBaseDelay = value;
            return this;
        }

        /** See {@link S3ClientSettings#retryMaxDelay()}. */
        public Builder retryMaxDelay(Duration value) {
            retryMaxDelay = value;
            return this;
        }

        /** See {@link S3ClientSettings#getsPerSecondPerPrefix()}. */
        public Builder getsPerSecondPerPrefix(double value) {
            getsPerSecondPerPrefix = value;
            return this;
        }

        /** See {@link S3ClientSettings#hedgeAfter()}. */
        public Builder hedgeAfter(Duration value) {
            hedgeAfter = value;
            return this;
        }

        /**
         * The settings.
         *
         * @throws IllegalArgumentException naming a setting that is unset or out of range
         */
        public S3ClientSettings build() {
            return new S3ClientSettings(this);
        }
    }
}
