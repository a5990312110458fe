package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.VideoRef;

/** What the fetch operators need to know about a record's videos given as frame images. */
final class FramedVideos {
    private FramedVideos() {}

    /** Whether any of {@code record}'s videos is given as a list of frame images. */
    static boolean any(SftRecord record) {
        for (VideoRef v : record.videos) {
            if (v.givenAsFrames()) {
                return true;
            }
        }
        return false;
    }

    /**
     * The objects to fetch for {@code record}: its images, then per video its file or its frames,
     * in order.
     */
    static int objects(SftRecord record) {
        int n = record.images.length;
        for (VideoRef v : record.videos) {
            n += v.givenAsFrames() ? v.frames.length : 1;
        }
        return n;
    }
}
