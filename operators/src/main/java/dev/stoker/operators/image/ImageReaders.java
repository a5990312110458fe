package dev.stoker.operators.image;

import java.io.IOException;
import java.lang.invoke.MethodHandleProxies;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ForkJoinPool;
import javax.imageio.ImageIO;
import javax.imageio.ImageReader;
import javax.imageio.spi.IIORegistry;
import javax.imageio.spi.ImageReaderSpi;
import javax.imageio.spi.ServiceRegistry;

/**
 * The ImageIO readers {@link ImageDecoder} uses, created without registering anything of the job in
 * ImageIO's plugin registry.
 *
 * <p>That registry ({@link IIORegistry#getDefaultInstance()}) is JVM-global. Whoever touches
 * ImageIO first creates it, and it then loads every {@code META-INF/services/javax.imageio.spi.*}
 * provider the creating thread's context class loader sees. In a Flink TaskManager that is the
 * first job's user-code class loader: the registry would keep TwelveMonkeys' JPEG reader (which
 * also orders itself before the JDK's) after that job ended and its class loader was closed, so the
 * next job on the TaskManager got that dead reader and failed with {@code NoClassDefFoundError:
 * com/twelvemonkeys/imageio/plugins/jpeg/JPEGSegmentWarningListener}, and the first job's classes
 * could never be unloaded. So:
 *
 * <ul>
 *   <li>the registry is created (when this class is the first in the JVM to touch ImageIO) on a
 *       common-pool thread, with the system class loader as the context class loader and no job
 *       class on the stack ({@link #createRegistryWithoutJobFrames}), so it holds the JDK's readers
 *       and those of the cluster's {@code lib/} only, and nothing that refers to the job;
 *   <li>PNG, GIF, BMP and the JDK's JPEG reader are taken from the registry, but only the JDK's own
 *       ({@code java.desktop}, boot class loader), whatever else another job registered;
 *   <li>TwelveMonkeys' JPEG reader (CMYK/YCCK, JPEGs libjpeg-turbo rejects) and WebP reader are
 *       created from their providers directly; the JPEG provider finds its delegate, the JDK's
 *       reader, in a registry of this class's own;
 *   <li>the job jar carries no ImageIO service files (job/pom.xml's shade filter), so even a
 *       registry created by some other code from the job's class loader finds nothing of it.
 * </ul>
 */
final class ImageReaders {
    /** TwelveMonkeys' JPEG reader provider, set up with the JDK's reader as its delegate. */
    private static final ImageReaderSpi TWELVE_MONKEYS_JPEG;

    /** Holds {@link #TWELVE_MONKEYS_JPEG} (and its delegate) registered, for the job's life. */
    private static final ServiceRegistry OWN_REGISTRY;

    static {
        createRegistryWithoutJobFrames();
        // JVM-global too, but a flag (the pixels are always in memory): no class of the job
        ImageIO.setUseCache(false);
        OWN_REGISTRY = new ServiceRegistry(List.<Class<?>>of(ImageReaderSpi.class).iterator());
        ImageReaderSpi jdkJpeg = jdkProvider(ImageFormat.JPEG.imageIoName);
        if (jdkJpeg != null) {
            OWN_REGISTRY.registerServiceProvider(jdkJpeg, ImageReaderSpi.class);
        }
        ImageReaderSpi twelveMonkeys =
                new com.twelvemonkeys.imageio.plugins.jpeg.JPEGImageReaderSpi();
        // onRegistration looks up the JDK's JPEG reader in this registry as its delegate
        OWN_REGISTRY.registerServiceProvider(twelveMonkeys, ImageReaderSpi.class);
        TWELVE_MONKEYS_JPEG = jdkJpeg == null ? null : twelveMonkeys;
    }

    private ImageReaders() {}

    /**
     * Creates ImageIO's registry, if nothing has yet, on a thread of the JVM's common pool: its
     * context class loader is the system class loader (the registry scans that one), and no frame
     * of the job is on its stack. The registry keeps the {@code AccessControlContext} of each
     * registration, which holds the protection domain, and so the class loader, of every class on
     * the registering thread's stack: created from a job's thread it would keep that job's classes
     * for the JVM's life. So the call goes through JDK classes only (a method handle proxy run by
     * the pool), and the pool's threads inherit no job context.
     */
    private static void createRegistryWithoutJobFrames() {
        Thread thread = Thread.currentThread();
        ClassLoader job = thread.getContextClassLoader();
        // the proxy class is defined by the context class loader: the system one, not the job's
        thread.setContextClassLoader(ClassLoader.getSystemClassLoader());
        try {
            Runnable create =
                    MethodHandleProxies.asInterfaceInstance(
                            Runnable.class,
                            MethodHandles.publicLookup()
                                    .findStatic(
                                            IIORegistry.class,
                                            "getDefaultInstance",
                                            MethodType.methodType(IIORegistry.class)));
            ForkJoinPool.commonPool().submit(create).get();
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("IIORegistry.getDefaultInstance is not accessible", e);
        } catch (ExecutionException e) {
            throw new IllegalStateException("ImageIO's registry could not be created", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while creating ImageIO's registry", e);
        } finally {
            thread.setContextClassLoader(job);
        }
    }

    /** Makes sure ImageIO's registry exists without the job's providers (see class comment). */
    static void init() {
        // class initialisation does it
    }

    /**
     * A new reader for {@code format}: TwelveMonkeys' for JPEG and WebP, the JDK's for PNG, GIF and
     * BMP.
     *
     * @return the reader; the caller disposes it
     * @throws IOException when the JDK has no reader for the format (a JRE without {@code
     *     java.desktop}'s plugins)
     */
    static ImageReader create(ImageFormat format) throws IOException {
        switch (format) {
            case WEBP:
                return new com.twelvemonkeys.imageio.plugins.webp.WebPImageReaderSpi()
                        .createReaderInstance(null);
            case JPEG:
                if (TWELVE_MONKEYS_JPEG == null) {
                    throw new IOException("the JDK has no ImageIO JPEG reader");
                }
                return TWELVE_MONKEYS_JPEG.createReaderInstance(null);
            default:
                ImageReaderSpi jdk = jdkProvider(format.imageIoName);
                if (jdk == null) {
                    throw new IOException("the JDK has no ImageIO reader for " + format);
                }
                return jdk.createReaderInstance(null);
        }
    }

    /** The JDK's own reader provider for an ImageIO format name, or null. */
    private static ImageReaderSpi jdkProvider(String formatName) {
        Iterator<ImageReaderSpi> providers =
                IIORegistry.getDefaultInstance()
                        .getServiceProviders(
                                ImageReaderSpi.class,
                                spi ->
                                        spi.getClass().getClassLoader() == null
                                                && Arrays.asList(
                                                                ((ImageReaderSpi) spi)
                                                                        .getFormatNames())
                                                        .contains(formatName),
                                false);
        return providers.hasNext() ? providers.next() : null;
    }
}
