package dev.stoker.operators;

import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The contract the fuzz tests check for a transform: on any input it returns or throws one of the
 * expected exception types within a time limit; anything else (another exception, an error, a hang)
 * fails the fuzz test, which Jazzer reports as a finding with the input that caused it.
 */
public final class FuzzContract {
    /**
     * One reused worker thread, so an input that hangs is detected instead of hanging the run;
     * replaced after a hang so that the next inputs do not queue behind it.
     */
    private static ExecutorService worker = newWorker();

    private static ExecutorService newWorker() {
        return Executors.newSingleThreadExecutor(
                r -> {
                    Thread t = new Thread(r, "fuzz-target");
                    t.setDaemon(true);
                    return t;
                });
    }

    private FuzzContract() {}

    /**
     * Runs {@code target}; returns its result, or {@code null} when it threw an instance of one of
     * {@code allowed}.
     *
     * @throws AssertionError when it threw anything else or did not finish within {@code limit}
     */
    @SafeVarargs
    public static synchronized <T> T call(
            Duration limit, Callable<T> target, Class<? extends Throwable>... allowed) {
        Future<T> future = worker.submit(target);
        try {
            return future.get(limit.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            for (Class<? extends Throwable> type : allowed) {
                if (type.isInstance(cause)) {
                    return null;
                }
            }
            throw new AssertionError(
                    "unexpected " + cause.getClass().getName() + ": " + cause.getMessage(), cause);
        } catch (TimeoutException e) {
            future.cancel(true);
            worker.shutdownNow();
            worker = newWorker();
            throw new AssertionError("no result after " + limit + " (hang)");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }
}
