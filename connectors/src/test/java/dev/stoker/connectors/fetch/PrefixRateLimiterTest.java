package dev.stoker.connectors.fetch;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

class PrefixRateLimiterTest {

    @Test
    void permitsOfOnePrefixAreSpreadOverTimeOtherPrefixesAreNotHeldBack() {
        PrefixRateLimiter limiter = new PrefixRateLimiter(20);
        long start = System.nanoTime();
        List<CompletableFuture<Void>> permits = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            permits.add(limiter.permit("data/images/" + i + ".jpg"));
        }
        // another prefix has its own budget
        assertThat(limiter.permit("data/other/0.jpg")).isDone();
        CompletableFuture.allOf(permits.toArray(new CompletableFuture[0])).join();
        double seconds = (System.nanoTime() - start) / 1e9;
        // 40 GETs at 20/s: the first 2 go at once (one 100 ms slice), the rest wait >= 1.9 s
        assertThat(seconds).isGreaterThanOrEqualTo(1.8);
        assertThat(permits.get(0)).isDone();
    }

    @Test
    void withoutLimitEveryPermitIsImmediate() {
        PrefixRateLimiter limiter = new PrefixRateLimiter(0);
        for (int i = 0; i < 1000; i++) {
            assertThat(limiter.permit("data/images/x.jpg")).isDone();
        }
    }
}
