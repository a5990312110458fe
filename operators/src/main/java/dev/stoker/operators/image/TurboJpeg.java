package dev.stoker.operators.image;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Whether libjpeg-turbo's Java API ({@code org.libjpegturbo.turbojpeg}, Debian {@code
 * libturbojpeg-java}) and its JNI library ({@code libturbojpeg.so}, Debian {@code
 * libturbojpeg0-dev}) can be used in this JVM. Probed once; when either is missing, {@link
 * ImageDecoder} decodes JPEGs with ImageIO instead and one WARN line says how to install them.
 *
 * <p>This class names no TurboJPEG type, so it loads whether or not the jar is on the classpath.
 */
final class TurboJpeg {
    private static final Logger LOG = LoggerFactory.getLogger(TurboJpeg.class);
    private static final boolean AVAILABLE = probe();

    private TurboJpeg() {}

    /** True when TurboJPEG decoding works in this JVM. */
    static boolean available() {
        return AVAILABLE;
    }

    private static boolean probe() {
        try {
            // TJ's static initialiser loads libturbojpeg (System.loadLibrary("turbojpeg"))
            Class.forName("org.libjpegturbo.turbojpeg.TJ", true, TurboJpeg.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            LOG.warn(
                    "libjpeg-turbo is not usable ({}), so JPEGs are decoded with ImageIO, several"
                            + " times slower. Install it with `apt-get install libturbojpeg-java"
                            + " libturbojpeg0-dev` and put /usr/share/java/turbojpeg.jar in Flink's"
                            + " lib/ (scripts/cluster.sh does), or set -Djava.library.path to the"
                            + " folder of libturbojpeg.so.",
                    e.toString());
            return false;
        }
    }
}
