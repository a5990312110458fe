package dev.stoker.operators.model;

import java.io.Serializable;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A setting that may differ per mixture source (image root, pixel budget, chat template, maximum
 * sequence length), looked up by a record's {@link RecordRef#source}.
 *
 * @param <T> the setting's type
 */
public final class PerSource<T extends Serializable> implements Serializable {
    private static final long serialVersionUID = 1L;

    private final T uniform;
    private final LinkedHashMap<String, T> bySource;

    private PerSource(T uniform, LinkedHashMap<String, T> bySource) {
        this.uniform = uniform;
        this.bySource = bySource;
    }

    /** The same value for every source (and for records outside a mixture). */
    public static <T extends Serializable> PerSource<T> uniform(T value) {
        return new PerSource<>(value, null);
    }

    /**
     * One value per source name.
     *
     * @throws IllegalArgumentException if {@code bySource} is empty
     */
    public static <T extends Serializable> PerSource<T> of(Map<String, T> bySource) {
        if (bySource.isEmpty()) {
            throw new IllegalArgumentException("no source");
        }
        return new PerSource<>(null, new LinkedHashMap<>(bySource));
    }

    /**
     * The value for {@code ref}'s source.
     *
     * @throws IllegalStateException if the values are per source and {@code ref.source} is not one
     *     of them (a record from outside the job's mixture)
     */
    public T of(RecordRef ref) {
        if (bySource != null && !bySource.containsKey(ref.source)) {
            throw new IllegalStateException(
                    "record " + ref + " is of source '" + ref.source + "', not one of " + names());
        }
        return get(ref.source);
    }

    /**
     * The value for source {@code source}.
     *
     * @throws IllegalStateException if the values are per source and {@code source} is not one
     */
    public T get(String source) {
        if (bySource == null) {
            return uniform;
        }
        T value = bySource.get(source);
        if (value == null) {
            throw new IllegalStateException("no source '" + source + "' in " + names());
        }
        return value;
    }

    /** The first source's value (the uniform one), for what all sources share. */
    public T first() {
        return bySource == null ? uniform : bySource.values().iterator().next();
    }

    private Collection<String> names() {
        return bySource.keySet();
    }
}
