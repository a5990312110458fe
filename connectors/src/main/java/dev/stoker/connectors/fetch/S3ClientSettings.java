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
 */
public final class S3ClientSettings implements Serializable {
    private static final long serialVersionUID = 1L;

    /** {@code http(s)://host:port} of an S3-compatible server; null for AWS's regional endpoint. */
    public String endpoint;

    /** AWS region name, e.g. {@code us-east-1}. */
    public String region = "us-east-1";

    /** Path-style addressing ({@code endpoint/bucket/key}) instead of virtual-host style. */
    public boolean pathStyleAccess;

    /** Access key id; null to use the default credential chain. */
    public String accessKey;

    /** Secret access key; null to use the default credential chain. Never logged. */
    public String secretKey;

    /**
     * HTTP connections per client: the most GETs (hedged ones included) it has on the wire at once.
     * {@link S3ImageStore} queues the GETs beyond it itself, so the client never makes a request
     * wait for a pooled connection while its timeouts run.
     */
    public int maxConnections = 64;

    /** Time limit of one HTTP attempt (first byte to last byte); exceeded attempts are retried. */
    public Duration attemptTimeout = Duration.ofSeconds(10);

    /** Time limit of one GET including all its retries. */
    public Duration requestTimeout = Duration.ofSeconds(30);

    /** Attempts per GET, the first one included (1 = no retry). */
    public int maxAttempts = 5;

    /** Base delay of the exponential backoff (full jitter) between attempts. */
    public Duration retryBaseDelay = Duration.ofMillis(100);

    /** Upper bound of one backoff delay. */
    public Duration retryMaxDelay = Duration.ofSeconds(5);

    /** Client-side GETs per second per key prefix (per subtask); 0 = no limit. */
    public double getsPerSecondPerPrefix;

    /** Send a second GET for one still running after this long; zero = never (no hedging). */
    public Duration hedgeAfter = Duration.ZERO;

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
}
