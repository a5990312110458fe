package dev.stoker.operators.image;

import java.io.IOException;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
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
 * com/twelvemonkeys/imageio/plugins/jpeg/JPEGSegmentWarningListener}. So:
 *
 * <ul>
 *   <li>the registry is created (when this class is the first in the JVM to touch ImageIO) with the
 *       system class loader as the context class loader ({@link
 *       #createRegistryWithoutJobProviders}), so it holds the JDK's readers and those of the
 *       cluster's {@code lib/} only (what it still keeps of the first job: see there);
 *   <li>PNG, GIF, BMP and the JDK's JPEG reader are taken from the registry, but only the JDK's own
 *       ({@code java.desktop}, boot class loader), whatever else another job registered;
 *   <li>TwelveMonkeys' JPEG reader (CMYK/YCCK, JPEGs libjpeg-turbo rejects), its WebP, TIFF, PSD,
 *       ICO, TGA, PNM and PCX readers, and jai-imageio's JPEG 2000 reader are created from their
 *       providers directly; the JPEG provider finds its delegate, the JDK's reader, in a
 *       short-lived registry of this class's own (the TIFF reader looks up a JPEG reader for
 *       JPEG-compressed TIFF in the global registry, where it finds the JDK's);
 *   <li>the job jar carries no ImageIO service files (job/pom.xml's shade filter), so even a
 *       registry created by some other code from the job's class loader finds nothing of it.
 * </ul>
 */
final class ImageReaders {
    /**
     * TwelveMonkeys' JPEG reader provider, set up with the JDK's reader as its delegate (by a
     * registration in a registry of this class's own, emptied again).
     */
    private static final ImageReaderSpi TWELVE_MONKEYS_JPEG;

    static {
        createRegistryWithoutJobProviders();
        // JVM-global too, but a flag (the pixels are always in memory): no class of the job
        ImageIO.setUseCache(false);
        ServiceRegistry own =
                new ServiceRegistry(List.<Class<?>>of(ImageReaderSpi.class).iterator());
        ImageReaderSpi jdkJpeg = jdkProvider("jpeg");
        if (jdkJpeg != null) {
            own.registerServiceProvider(jdkJpeg, ImageReaderSpi.class);
        }
        ImageReaderSpi twelveMonkeys =
                new com.twelvemonkeys.imageio.plugins.jpeg.JPEGImageReaderSpi();
        // onRegistration looks up the JDK's JPEG reader in this registry as its delegate
        own.registerServiceProvider(twelveMonkeys, ImageReaderSpi.class);
        // A registry records access-control contexts (this job's classes) and is finalizable:
        // empty, it keeps nothing of the job until the finalizer has run.
        own.deregisterAll();
        TWELVE_MONKEYS_JPEG = jdkJpeg == null ? null : twelveMonkeys;
    }

    /** The plug-ins' reader providers (stateless, created once), by format. */
    private static final Map<ImageFormat, ImageReaderSpi> PLUGINS =
            new EnumMap<>(
                    Map.of(
                            ImageFormat.WEBP,
                            new com.twelvemonkeys.imageio.plugins.webp.WebPImageReaderSpi(),
                            ImageFormat.TIFF,
                            new com.twelvemonkeys.imageio.plugins.tiff.TIFFImageReaderSpi(),
                            ImageFormat.PSD,
                            new com.twelvemonkeys.imageio.plugins.psd.PSDImageReaderSpi(),
                            ImageFormat.ICO,
                            new com.twelvemonkeys.imageio.plugins.bmp.ICOImageReaderSpi(),
                            ImageFormat.TGA,
                            new com.twelvemonkeys.imageio.plugins.tga.TGAImageReaderSpi(),
                            ImageFormat.PNM,
                            new com.twelvemonkeys.imageio.plugins.pnm.PNMImageReaderSpi(),
                            ImageFormat.PCX,
                            new com.twelvemonkeys.imageio.plugins.pcx.PCXImageReaderSpi(),
                            ImageFormat.JPEG2000,
                            new com.github.jaiimageio.jpeg2000.impl.J2KImageReaderSpi()));

    private ImageReaders() {}

    /**
     * Creates ImageIO's registry, if nothing has yet, with the system class loader as the context
     * class loader: the registry loads the providers that loader sees (the JDK's, the cluster's
     * {@code lib/}), never the job's.
     *
     * <p>What stays: the registry records the {@code AccessControlContext} of each registration,
     * which refers to the class loader of every class on the registering thread's stack. So the job
     * that first touches ImageIO in a JVM stays referenced by it (one job's classes per TaskManager
     * JVM, not one per job: later jobs register nothing). A cluster that must not keep even that
     * one creates the registry before any job (e.g. a class in {@code lib/}).
     */
    private static void createRegistryWithoutJobProviders() {
        Thread thread = Thread.currentThread();
        ClassLoader job = thread.getContextClassLoader();
        thread.setContextClassLoader(ClassLoader.getSystemClassLoader());
        try {
            IIORegistry.getDefaultInstance();
        } finally {
            thread.setContextClassLoader(job);
        }
    }

    /** Makes sure ImageIO's registry exists without the job's providers (see class comment). */
    static void init() {
        // class initialisation does it
    }

    /**
     * A new reader for {@code format}: the JDK's for PNG, GIF and BMP; TwelveMonkeys' for JPEG,
     * WebP, TIFF, PSD, ICO, TGA, PNM and PCX; jai-imageio's JJ2000 reader for JPEG 2000. QOI has no
     * ImageIO reader ({@link ImageDecoder} decodes it with qoi-java).
     *
     * @return the reader; the caller disposes it
     * @throws IOException when the JDK has no reader for the format (a JRE without {@code
     *     java.desktop}'s plugins)
     * @throws IllegalArgumentException for QOI
     */
    static ImageReader create(ImageFormat format) throws IOException {
        switch (format) {
            case JPEG:
                if (TWELVE_MONKEYS_JPEG == null) {
                    throw new IOException("the JDK has no ImageIO JPEG reader");
                }
                return TWELVE_MONKEYS_JPEG.createReaderInstance(null);
            case PNG:
            case GIF:
            case BMP:
                ImageReaderSpi jdk = jdkProvider(format.name().toLowerCase(Locale.ROOT));
                if (jdk == null) {
                    throw new IOException("the JDK has no ImageIO reader for " + format);
                }
                return jdk.createReaderInstance(null);
            default:
                ImageReaderSpi plugin = PLUGINS.get(format);
                if (plugin == null) {
                    throw new IllegalArgumentException("no ImageIO reader for " + format);
                }
                return plugin.createReaderInstance(null);
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
