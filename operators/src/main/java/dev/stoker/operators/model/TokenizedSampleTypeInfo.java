package dev.stoker.operators.model;

import java.lang.reflect.Type;
import java.util.Map;
import org.apache.flink.api.common.serialization.SerializerConfig;
import org.apache.flink.api.common.typeinfo.TypeInfoFactory;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.TypeSerializer;

/**
 * Flink type information of {@link TokenizedSample}: an opaque (non-key) type serialized by {@link
 * TokenizedSampleSerializer}. Chosen by Flink's type extraction through the {@code @TypeInfo}
 * annotation on {@link TokenizedSample}, also where it is a field (e.g. of {@link SlotResult}).
 */
public final class TokenizedSampleTypeInfo extends TypeInformation<TokenizedSample> {
    private static final long serialVersionUID = 1L;

    @Override
    public boolean isBasicType() {
        return false;
    }

    @Override
    public boolean isTupleType() {
        return false;
    }

    @Override
    public int getArity() {
        return 1;
    }

    @Override
    public int getTotalFields() {
        return 1;
    }

    @Override
    public Class<TokenizedSample> getTypeClass() {
        return TokenizedSample.class;
    }

    @Override
    public boolean isKeyType() {
        return false;
    }

    @Override
    public TypeSerializer<TokenizedSample> createSerializer(SerializerConfig config) {
        return new TokenizedSampleSerializer();
    }

    @Override
    public String toString() {
        return "TokenizedSample";
    }

    @Override
    public boolean equals(Object obj) {
        return obj instanceof TokenizedSampleTypeInfo;
    }

    @Override
    public int hashCode() {
        return TokenizedSampleTypeInfo.class.hashCode();
    }

    @Override
    public boolean canEqual(Object obj) {
        return obj instanceof TokenizedSampleTypeInfo;
    }

    /** The factory named by {@code @TypeInfo} on {@link TokenizedSample}. */
    public static final class Factory extends TypeInfoFactory<TokenizedSample> {
        @Override
        public TypeInformation<TokenizedSample> createTypeInfo(
                Type t, Map<String, TypeInformation<?>> genericParameters) {
            return new TokenizedSampleTypeInfo();
        }
    }
}
