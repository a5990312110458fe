package dev.stoker.connectors.fetch;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import org.reactivestreams.Subscriber;
import org.reactivestreams.Subscription;
import software.amazon.awssdk.core.FileTransformerConfiguration;
import software.amazon.awssdk.core.FileTransformerConfiguration.FailureBehavior;
import software.amazon.awssdk.core.FileTransformerConfiguration.FileWriteOption;
import software.amazon.awssdk.core.ResponseBytes;
import software.amazon.awssdk.core.async.AsyncResponseTransformer;
import software.amazon.awssdk.core.async.SdkPublisher;
import software.amazon.awssdk.services.s3.model.GetObjectResponse;

/**
 * Receives the body of one GET request (all its attempts: the SDK prepares it again for each retry)
 * and decides from the response's headers, before any byte of the body is read, where it goes:
 * nowhere when the object's total size is over the limit (the body's stream is cancelled), into
 * memory ({@link AsyncResponseTransformer#toBytes()}), or, when a {@link SpillDirectory} is given
 * and the body is larger than its threshold (or of unknown length), into this request's own spill
 * file ({@link AsyncResponseTransformer#toFile}: replaced by each attempt, deleted by the SDK when
 * an attempt fails).
 *
 * <p>{@link #abandon()} deletes the spill file and keeps any later attempt from writing one: for a
 * request whose body is not wanted (a hedged request that lost, a read that failed).
 */
final class BodyTransformer
        implements AsyncResponseTransformer<GetObjectResponse, BodyTransformer.Body> {
    /**
     * A GET's outcome.
     *
     * @param response the response (headers)
     * @param object the body, or null when the object was refused from its size unread
     * @param total the object's total size in bytes, from {@code Content-Range} (else the length
     *     received)
     */
    record Body(GetObjectResponse response, FetchedObject object, long total) {}

    private final long limit;
    private final SpillDirectory spill;
    private final Path file;
    private boolean abandoned; // guarded by this
    private volatile CompletableFuture<Body> result;
    private volatile AsyncResponseTransformer<GetObjectResponse, ?> delegate;

    /**
     * @param limit the largest object accepted, in bytes
     * @param spill where a body over the threshold goes, or null to keep every body in memory
     */
    BodyTransformer(long limit, SpillDirectory spill) {
        this.limit = limit;
        this.spill = spill;
        this.file = spill != null ? spill.newFile() : null;
    }

    @Override
    public CompletableFuture<Body> prepare() {
        delegate = null;
        CompletableFuture<Body> attempt = new CompletableFuture<>();
        result = attempt;
        return attempt;
    }

    @Override
    public void onResponse(GetObjectResponse response) {
        CompletableFuture<Body> attempt = result;
        Long length = response.contentLength();
        long total = S3ImageStore.totalSize(response.contentRange(), length != null ? length : 0);
        if (total > limit) {
            attempt.complete(new Body(response, null, total));
            return;
        }
        if (spill != null && (length == null || spill.spills(length))) {
            AsyncResponseTransformer<GetObjectResponse, GetObjectResponse> toFile =
                    AsyncResponseTransformer.toFile(
                            file,
                            FileTransformerConfiguration.builder()
                                    .fileWriteOption(FileWriteOption.CREATE_OR_REPLACE_EXISTING)
                                    .failureBehavior(FailureBehavior.DELETE)
                                    .build());
            toFile.prepare()
                    .whenComplete(
                            (r, error) -> {
                                if (error != null) {
                                    attempt.completeExceptionally(error);
                                    return;
                                }
                                try {
                                    long size = Files.size(file);
                                    attempt.complete(
                                            new Body(
                                                    response,
                                                    FetchedObject.spilled(file, size),
                                                    S3ImageStore.totalSize(
                                                            response.contentRange(), size)));
                                } catch (IOException e) {
                                    attempt.completeExceptionally(new UncheckedIOException(e));
                                }
                            });
            delegate = toFile;
            toFile.onResponse(response);
        } else {
            AsyncResponseTransformer<GetObjectResponse, ResponseBytes<GetObjectResponse>> bytes =
                    AsyncResponseTransformer.toBytes();
            bytes.prepare()
                    .whenComplete(
                            (r, error) -> {
                                if (error != null) {
                                    attempt.completeExceptionally(error);
                                    return;
                                }
                                byte[] body = r.asByteArrayUnsafe();
                                attempt.complete(
                                        new Body(
                                                response,
                                                FetchedObject.inMemory(body),
                                                S3ImageStore.totalSize(
                                                        response.contentRange(), body.length)));
                            });
            delegate = bytes;
            bytes.onResponse(response);
        }
    }

    @Override
    public void onStream(SdkPublisher<ByteBuffer> publisher) {
        synchronized (this) {
            AsyncResponseTransformer<GetObjectResponse, ?> d = delegate;
            if (d != null && !abandoned) {
                d.onStream(publisher);
                return;
            }
        }
        publisher.subscribe(new Cancelling()); // refused from its size, or abandoned
        if (abandoned) {
            result.completeExceptionally(new IOException("abandoned"));
        }
    }

    @Override
    public void exceptionOccurred(Throwable error) {
        AsyncResponseTransformer<GetObjectResponse, ?> d = delegate;
        if (d != null) {
            d.exceptionOccurred(error); // closes and deletes the spill file
        }
        CompletableFuture<Body> attempt = result;
        if (attempt != null) {
            attempt.completeExceptionally(error);
        }
    }

    /**
     * Deletes this request's spill file and keeps any later attempt from writing it (an attempt
     * already writing goes on into the deleted file, whose space is freed when it ends); for a
     * request whose body is not wanted. Does nothing without a spill directory.
     */
    void abandon() {
        if (file == null) {
            return;
        }
        synchronized (this) {
            abandoned = true;
        }
        SpillDirectory.deleteQuietly(file);
    }

    /** This request's spill file (it exists only once a body is written to it), or null. */
    Path file() {
        return file;
    }

    /** Cancels the body's stream at once: nothing of it is read. */
    private static final class Cancelling implements Subscriber<ByteBuffer> {
        @Override
        public void onSubscribe(Subscription subscription) {
            subscription.cancel();
        }

        @Override
        public void onNext(ByteBuffer buffer) {}

        @Override
        public void onError(Throwable error) {}

        @Override
        public void onComplete() {}
    }
}
