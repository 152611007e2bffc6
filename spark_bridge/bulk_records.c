/* Kafka v2 record sections -> Arrow column buffers, in one call per Arrow batch.
 *
 * Loaded with ctypes by spark_bridge/bulk_decode.py (which compiles it with the system C
 * compiler once per source version and machine). Plain C, no Python headers: the caller owns
 * every buffer and sizes it from the sections (rows <= record counts, bytes <= section bytes).
 *
 * It must never read outside a section nor write past the sizes the caller gave, and it is
 * strict: anything the Python decoders might answer differently (a varint wider than its type,
 * a length below -1, a record whose fields do not fill it exactly, a header with a null key,
 * a sum that overflows 64 bits) makes the whole call fail (-1), and the caller decodes those
 * batches with the per-record decoders instead, so results never depend on which path ran.
 */
#include <stdint.h>
#include <string.h>

#define SECTION_FIELDS 10 /* addr, len, base_offset, base_ts, max_ts, log_append, count, lo, hi, ts_type */

/* A zigzag varint of at most max_bytes bytes whose value fits in `bits` bits (before zigzag). */
static int read_varint(const uint8_t *buf, int64_t *pos, int64_t end, int max_bytes, int bits,
                       int64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end) return -1;
        uint8_t b = buf[(*pos)++];
        uint64_t part = (uint64_t)(b & 0x7F);
        if (shift + 7 > bits && (part >> (bits - shift)) != 0) return -1;
        v |= part << shift;
        if (b < 0x80) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

#define VARINT(dst) if (read_varint(buf, &pos, rec_end, 5, 32, &(dst))) return -1
#define VARLONG(dst) if (read_varint(buf, &pos, rec_end, 10, 64, &(dst))) return -1

static void set_bit(uint8_t *bitmap, int64_t i) { bitmap[i >> 3] |= (uint8_t)(1u << (i & 7)); }

int64_t lw_decode_sections(
    int64_t nsec, const int64_t *sections,
    int64_t *out_offset, int64_t *out_ts_us, int32_t *out_ts_type,
    int32_t *key_off, uint8_t *key_valid, uint8_t *key_data,
    int32_t *val_off, uint8_t *val_valid, uint8_t *val_data,
    int32_t *hlist_off, int32_t *hkey_off, uint8_t *hkey_data,
    int32_t *hval_off, uint8_t *hval_valid, uint8_t *hval_data,
    int64_t *counts /* rows, key nulls, value nulls, headers, header value nulls */) {
    int64_t rows = 0, key_nulls = 0, val_nulls = 0, nheaders = 0, hval_nulls = 0;
    int32_t key_bytes = 0, val_bytes = 0, hkey_bytes = 0, hval_bytes = 0;
    int want_headers = hlist_off != NULL;
    key_off[0] = val_off[0] = 0;
    if (want_headers) hlist_off[0] = hkey_off[0] = hval_off[0] = 0;
    for (int64_t s = 0; s < nsec; s++) {
        const int64_t *sec = sections + s * SECTION_FIELDS;
        const uint8_t *buf = (const uint8_t *)(intptr_t)sec[0];
        int64_t size = sec[1], base_offset = sec[2], base_ts = sec[3], max_ts = sec[4];
        int64_t log_append = sec[5], count = sec[6], lo = sec[7], hi = sec[8];
        int32_t ts_type = (int32_t)sec[9];
        int64_t pos = 0;
        for (int64_t r = 0; r < count; r++) {
            int64_t length, ts_delta, offset_delta, n, hcount, offset, ts;
            int64_t rec_end = size;
            VARINT(length);
            if (length < 0 || length > size - pos) return -1;
            rec_end = pos + length;
            if (pos >= rec_end) return -1;
            pos++; /* attributes */
            VARLONG(ts_delta);
            VARINT(offset_delta);
            if (__builtin_add_overflow(base_offset, offset_delta, &offset)) return -1;
            if (log_append) {
                ts = max_ts;
            } else if (__builtin_add_overflow(base_ts, ts_delta, &ts)) {
                return -1;
            }
            if (__builtin_mul_overflow(ts, (int64_t)1000, &ts)) return -1;
            int keep = offset >= lo && offset < hi;
            /* key */
            VARINT(n);
            if (n < -1 || n > rec_end - pos) return -1;
            if (keep) {
                if (n < 0) key_nulls++;
                else {
                    memcpy(key_data + key_bytes, buf + pos, (size_t)n);
                    key_bytes += (int32_t)n;
                    set_bit(key_valid, rows);
                }
                key_off[rows + 1] = key_bytes;
            }
            if (n > 0) pos += n;
            /* value */
            VARINT(n);
            if (n < -1 || n > rec_end - pos) return -1;
            if (keep) {
                if (n < 0) val_nulls++;
                else {
                    memcpy(val_data + val_bytes, buf + pos, (size_t)n);
                    val_bytes += (int32_t)n;
                    set_bit(val_valid, rows);
                }
                val_off[rows + 1] = val_bytes;
            }
            if (n > 0) pos += n;
            /* headers */
            VARINT(hcount);
            if (hcount < 0) return -1;
            for (int64_t h = 0; h < hcount; h++) {
                VARINT(n);
                if (n < 0 || n > rec_end - pos) return -1;
                if (keep && want_headers) {
                    memcpy(hkey_data + hkey_bytes, buf + pos, (size_t)n);
                    hkey_bytes += (int32_t)n;
                    hkey_off[nheaders + 1] = hkey_bytes;
                }
                pos += n;
                VARINT(n);
                if (n < -1 || n > rec_end - pos) return -1;
                if (keep && want_headers) {
                    if (n < 0) hval_nulls++;
                    else {
                        memcpy(hval_data + hval_bytes, buf + pos, (size_t)n);
                        hval_bytes += (int32_t)n;
                        set_bit(hval_valid, nheaders);
                    }
                    hval_off[nheaders + 1] = hval_bytes;
                    nheaders++;
                }
                if (n > 0) pos += n;
            }
            if (pos != rec_end) return -1;
            if (keep) {
                out_offset[rows] = offset;
                out_ts_us[rows] = ts;
                out_ts_type[rows] = ts_type;
                if (want_headers) hlist_off[rows + 1] = (int32_t)nheaders;
                rows++;
            }
        }
        if (pos != size) return -1;
    }
    counts[0] = rows;
    counts[1] = key_nulls;
    counts[2] = val_nulls;
    counts[3] = nheaders;
    counts[4] = hval_nulls;
    return rows;
}
