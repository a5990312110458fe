package dev.stoker.operators.json;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.lang.ref.WeakReference;
import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What a TaskManager does with a finished job, in one JVM: the job's classes (this module's and
 * Jackson's) are loaded by their own class loader, JSON is read on a thread that outlives the job
 * (Flink's {@code flink-metrics-N} thread reading a sink gauge), then the loader is dropped and the
 * test runs full GCs until a weak reference to it clears, i.e. the JVM can unload the job's
 * classes. The control, Jackson's default {@code new ObjectMapper()} in the same setting, keeps the
 * loader: its thread-local buffer pool is what kept every finished job in the TaskManager.
 */
class JsonTest {
    private static final String JSON = "{\"consumed_step\": 7, \"wait_time_ratio\": 0.25}";

    /** The thread that outlives the "job", as Flink's metric threads outlive every job. */
    private ExecutorService longLived;

    @BeforeEach
    void startThread() {
        longLived = Executors.newSingleThreadExecutor();
    }

    @AfterEach
    void stopThread() throws InterruptedException {
        longLived.shutdownNow();
        assertThat(longLived.awaitTermination(10, TimeUnit.SECONDS)).isTrue();
    }

    @Test
    void jsonReadThroughJsonOnALongLivedThreadLeavesTheJobsClassLoaderCollectable()
            throws Exception {
        WeakReference<ClassLoader> loader = readJsonInAJobLoader(true);

        assertThat(collected(loader, 20))
                .as("the job's class loader is unreachable after JSON was read through Json")
                .isTrue();
    }

    @Test
    void controlJacksonsDefaultMapperKeepsTheJobsClassLoaderThroughTheThread() throws Exception {
        WeakReference<ClassLoader> loader = readJsonInAJobLoader(false);

        assertThat(collected(loader, 5))
                .as("Jackson's thread-local pool keeps the loader while the thread lives")
                .isFalse();
        stopThread(); // the thread ends: its thread-locals go, and the loader with them
        assertThat(collected(loader, 20)).isTrue();
    }

    @Test
    void factoriesAndMappersShareOnePoolThatGetsTheBuffersBack() throws Exception {
        JsonFactory factory = Json.factory();
        ObjectMapper mapper = Json.mapper();

        assertThat(mapper.getFactory()._getRecyclerPool()).isSameAs(factory._getRecyclerPool());
        assertThat(Json.factoryBuilder().build()._getRecyclerPool())
                .isSameAs(factory._getRecyclerPool());
        assertThat(mapper.readTree(JSON).path("consumed_step").asLong()).isEqualTo(7);
        assertThat(factory._getRecyclerPool().pooledCount()).isPositive();
    }

    /**
     * Loads {@link Json} and Jackson in a fresh class loader (parent: the platform loader, so no
     * class is shared with the test's), reads {@link #JSON} on {@link #longLived} with a mapper
     * from {@link Json#mapper()} ({@code throughJson}) or Jackson's {@code new ObjectMapper()}, and
     * returns only a weak reference to the loader.
     */
    private WeakReference<ClassLoader> readJsonInAJobLoader(boolean throughJson) throws Exception {
        URL[] classpath = {
            location(Json.class),
            location(ObjectMapper.class),
            location(JsonFactory.class),
            // jackson-annotations, which databind needs at run time (not a compile dependency here)
            location(Class.forName("com.fasterxml.jackson.annotation.JsonProperty"))
        };
        try (URLClassLoader job =
                new URLClassLoader("job", classpath, ClassLoader.getPlatformClassLoader())) {
            Object mapper =
                    throughJson
                            ? job.loadClass(Json.class.getName()).getMethod("mapper").invoke(null)
                            : job.loadClass(ObjectMapper.class.getName())
                                    .getConstructor()
                                    .newInstance();
            assertThat(mapper.getClass().getClassLoader()).isSameAs(job);
            Method readTree = mapper.getClass().getMethod("readTree", String.class);
            Method path = readTree.getReturnType().getMethod("path", String.class);
            Method asLong = readTree.getReturnType().getMethod("asLong");
            // all of Jackson's work on the long-lived thread (JsonNode.toString() would use a
            // mapper of Jackson's own, on this thread)
            Object step =
                    longLived
                            .submit(
                                    () ->
                                            asLong.invoke(
                                                    path.invoke(
                                                            readTree.invoke(mapper, JSON),
                                                            "consumed_step")))
                            .get();
            assertThat(step).isEqualTo(7L);
            return new WeakReference<>(job);
        }
    }

    private static URL location(Class<?> c) {
        return c.getProtectionDomain().getCodeSource().getLocation();
    }

    /** Whether {@code ref} clears within {@code gcs} full GCs (each followed by a short pause). */
    private static boolean collected(WeakReference<?> ref, int gcs) throws InterruptedException {
        for (int i = 0; i < gcs && ref.get() != null; i++) {
            System.gc();
            Thread.sleep(50);
        }
        return ref.get() == null;
    }
}
