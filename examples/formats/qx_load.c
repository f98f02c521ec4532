/* qx_load.c - qx_load_model: format detection and loading (see qx_load.h).

   Detection, in this order (the first bytes decide where they can, the name only where they cannot):
     a directory                         -> Hugging Face directory (config.json + safetensors)
     "GGUF" magic                        -> GGUF
     u32 0x616b3432 ("ak42")             -> llama2.c version-1 export (version 2 is refused there)
     name ending in .safetensors, or a
     u64 header length followed by '{'   -> safetensors file (config.json beside it, if any); one whose
                                            header starts with quarot-packed metadata -> qx_packed_load
     a legacy header that passes the llama2.c checks (positive sizes that divide, no overflow) and
     implies exactly the file's size, or any file named *.bin
                                         -> llama2.c legacy (v0) checkpoint
   Anything else is refused with one line naming the file and what was expected. The readers
   themselves validate everything (sizes, offsets, JSON, dtypes, architectures) and word their own
   errors; quantized GGUF tensors other than Q4_0 / Q8_0 are refused there. */
#include "formats/qx_load.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_packed.h"
#include "formats/qx_safetensors.h"
#include "support/qx_str.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static quarot_result qx__load_model(const char* path, const qx_load_opts* opts, qx_store* out, qx_err* err) {
    unsigned char head[256];
    struct stat st;
    ssize_t got;
    size_t n;
    int fd, copy = opts ? opts->copy : 0;
    quarot_result r;
    if (!out) return QUAROT_ERR_INVALID_ARGUMENT;
    qx_store_init(out);
    if (!path || !path[0]) { qx_err_set(err, "(no path): nothing to load"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (stat(path, &st) != 0) { qx_err_set(err, "%s: %s", path, strerror(errno)); return QUAROT_ERR_IO; }

    if (S_ISDIR(st.st_mode)) {
        qx_st_read_opts so;
        memset(&so, 0, sizeof so);
        so.copy = copy;
        r = qx_st_load(path, out, &so, err);
        if (r == QUAROT_OK) snprintf(out->source_format, sizeof out->source_format, "safetensors-dir");
        return r;
    }
    if (!S_ISREG(st.st_mode)) { qx_err_set(err, "%s: not a regular file or directory", path); return QUAROT_ERR_IO; }

    if ((r = qx_open_input(path, &fd, err)) != QUAROT_OK) return r;
    got = pread(fd, head, sizeof head, 0);
    close(fd);
    if (got < 0) { qx_err_set(err, "%s: cannot read: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    n = (size_t)got;

    if (n >= 4 && memcmp(head, "GGUF", 4) == 0) {
        qx_gguf_read_opts go;
        memset(&go, 0, sizeof go);
        go.copy = copy;
        r = qx_gguf_load(path, out, &go, err);
        if (r == QUAROT_OK) snprintf(out->source_format, sizeof out->source_format, "gguf");
        return r;
    }
    if (qx_str_ends_with(path, ".gguf")) {
        qx_err_set(err, "%s: not a GGUF file (no \"GGUF\" magic in the first bytes)", path);
        return QUAROT_ERR_PARSE;
    }
    if (qx_str_ends_with(path, ".safetensors") || (n >= 9 && head[8] == '{' && qx_str_le64(head) >= 2 &&
                                                 qx_str_le64(head) <= (uint64_t)st.st_size - 8)) {
        qx_st_read_opts so;
        if (qx_packed_sniff(head, n)) return qx_packed_load(path, out, err);   /* quarot quantize's packed W4A4 file */
        memset(&so, 0, sizeof so);
        so.copy = copy;
        r = qx_st_load(path, out, &so, err);
        if (r == QUAROT_OK) {
            if (!out->config.arch[0]) {   /* no config.json beside the file: tensors without a model */
                qx_store_free(out);
                qx_err_set(err, "%s: no config.json beside this file, so its architecture is unknown (put the "
                                "model's config.json next to it or pass its directory)", path);
                return QUAROT_ERR_PARSE;
            }
            snprintf(out->source_format, sizeof out->source_format, "safetensors");
        }
        return r;
    }
    {
        /* llama2.c: v1 by its magic; v0 only by a header that checks out (or the .bin name). */
        qx_l2c_header h;
        qx_err herr;
        int v1 = n >= 4 && head[0] == 0x32 && head[1] == 0x34 && head[2] == 0x6b && head[3] == 0x61;
        int sane = qx_l2c_parse_header(head, n, path, &h, &herr) == QUAROT_OK && h.expected_size == (uint64_t)st.st_size;
        if (v1 || sane || qx_str_ends_with(path, ".bin")) {
            qx_l2c_read_opts lo;
            memset(&lo, 0, sizeof lo);
            lo.copy = copy;
            lo.writable = opts ? opts->writable : 0;
            return qx_l2c_read_file(path, &lo, out, err);   /* sets source_format */
        }
    }
    qx_err_set(err, "%s: unknown format: not a llama2.c checkpoint (.bin), a safetensors file, a GGUF file or a "
                    "Hugging Face model directory", path);
    return QUAROT_ERR_PARSE;
}

quarot_result qx_load_model(const char* path, const qx_load_opts* opts, qx_store* out, qx_err* err) {
    quarot_result r = qx__load_model(path, opts, out, err);
    if (r == QUAROT_OK) qx_fault_truncate_inputs("load");   /* tests: the input truncated once it is loaded */
    return r;
}
