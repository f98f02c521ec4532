/* qx_cmd_rotate.c - `quarot rotate IN OUT`: rotate a checkpoint into a new one of the same format.

   The input is mapped and validated (qx_load_model), the options become a quarot_rotate_desc,
   and qx_rotate_file runs the processor layer by layer, writing the output through temporaries
   (see qx_rotate_file.h for the memory model). This file holds the option parsing, the output
   path rules (where the hook file and config.json go, what counts as overwriting) and the summary;
   everything after the option parsing is qx_rotate_job_run (qx_rotate_job.h), which `quarot run`
   shares. With --rotation adapt, R1 is Adapt Rotation stage 2: H*R from a stage-1 context file
   (quarot calibrate), H rebuilt from the context's seed and block. */
#include "eval/qx_calib.h"
#include "cli/qx_cli.h"
#include "pipeline/qx_convert.h"
#include "eval/qx_evalkit.h"
#include "model/qx_online.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_json.h"
#include "pipeline/qx_layerwise.h"
#include "pipeline/qx_rotate_file.h"
#include "support/qx_direct.h"
#include "cli/qx_rotate_job.h"
#include "cli/qx_rotcheck.h"
#include "formats/qx_load.h"
#include "cli/qx_opts.h"
#include "tokenizer/qx_tok_load.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct rotate_opts {
    const char *in, *out, *layers, *mmproj, *mmproj_out;
    int online, r3, f64, format, dtype, check, text_only;
    qx_opts_common c;
    qx_opts_rotation rot;
} rotate_opts;

static const qx_opt_choice rotate_formats[] = {{"llama2c", 1}, {"safetensors", 2}, {"gguf", 3}, {NULL, 0}};
static const qx_opt_choice rotate_dtypes[] = {
    {"f32", QUAROT_DTYPE_F32}, {"f16", QUAROT_DTYPE_F16}, {"bf16", QUAROT_DTYPE_BF16}, {NULL, 0}};

static const qx_opt rotate_table[] = {
    {QX_OPT_FLAG, "--online", QX_AT(rotate_opts, online),
     .help = "QuaRot's online rotations: the offline halves of a Hadamard before every down_proj (R4) and across the heads "
             "before every o_proj are folded into the weights; the engine must apply the other halves (see below)"},
    {QX_OPT_FLAG, "--r3", QX_AT(rotate_opts, r3),
     .help = "online q/k Hadamard after RoPE (for KV-cache quantization; weights unchanged)"},
    {QX_OPT_STRING, "--down-proj-online-layers", .arg = "LIST", QX_AT(rotate_opts, layers), .def = "every layer",
     .help = "with --online: only these layers get the down_proj rotation, e.g. \"0,3,5-7\""},
    {QX_OPT_CHOICE, "--format", .arg = "FMT", QX_AT(rotate_opts, format), .choices = rotate_formats,
     .def = "from OUT's name, else IN's format",
     .help = "OUT's format: llama2c, safetensors (a directory unless OUT ends in .safetensors) or gguf"},
    {QX_OPT_CHOICE, "--dtype", QX_AT(rotate_opts, dtype), .choices = rotate_dtypes, .def = "as in IN; llama2.c is always f32",
     .help = "output tensor dtype"},
    {QX_OPT_STRING, "--mmproj", .arg = "FILE", QX_AT(rotate_opts, mmproj),
     .help = "IN a llama.cpp qwen2vl text GGUF: its mmproj file (the vision tower); the merger's output projection in it "
             "(mm.2) is rotated by the same R1, everything else copied (needs --mmproj-out)"},
    {QX_OPT_STRING, "--mmproj-out", .arg = "FILE", QX_AT(rotate_opts, mmproj_out),
     .help = "where --mmproj's rotated copy goes (written with OUT, through a temporary)"},
    {QX_OPT_FLAG, "--text-only", QX_AT(rotate_opts, text_only),
     .help = "a Hugging Face Qwen2-VL / Qwen2.5-VL IN to a GGUF OUT: write the text decoder alone (llama.cpp's qwen2vl; "
             "llama.cpp keeps the vision tower in a separate mmproj file); its merger is rotated but not written, so image "
             "prompts need the vision tower of IN rotated to safetensors with the same options"},
    {QX_OPT_FLAG, "--f64", QX_AT(rotate_opts, f64),
     .help = "rotate in double for every output dtype (default: f32 arithmetic for weights written as f16/bf16, which moves "
             "~0.05% of them by one unit in the last place)"},
    {QX_OPT_FLAG, "--check", QX_AT(rotate_opts, check),
     .help = "after writing, run IN and OUT (with its hooks) through the reference forward pass on 16 tokens and print "
             "the largest logit difference and, for mixture-of-experts models, the tokens routed to other experts "
             "(one more pass over the weights of both)"},
    {QX_OPT_END}
};
static const qx_opt_group rotate_group = {NULL, rotate_table, NULL};

const qx_opts_cmd qx_cmd_rotate_spec = {
    .name = "rotate",
    .about = "Rotate the checkpoint IN with QuaRot and write it to OUT (same format, or converted): RMSNorm gains fused\n"
             "into the linears that read them, a random Hadamard rotation R1 of the residual stream folded\n"
             "into every weight (embeddings, q/k/v/o, gate/up/down, lm_head) and a per-head Hadamard R2 folded\n"
             "into v_proj/o_proj. Without --online / --r3 the result is an ordinary checkpoint that any engine\n"
             "for that format runs unchanged, computing the same function (tied embeddings become a separate\n"
             "lm_head when the final norm is fused: llama2.c gets a separate classifier, config.json gets\n"
             "tie_word_embeddings=false, GGUF gets output.weight).\n"
             "With --context (Adapt Rotation stage 2; --rotation adapt is then implied) H is rebuilt from the\n"
             "context's seed and block, so --seed may be left out (a --seed different from the context's is\n"
             "refused) and --block-size is the context's (-1 = the context's block; another value must equal it).\n"
             "\n"
             "formats (IN's detected from its bytes; OUT's from --format, else its name: .bin llama2.c, .gguf,\n"
             ".safetensors; else IN's format). An OUT name naming another format than --format is an error.\n"
             "Conversions: llama2.c -> GGUF / safetensors, safetensors <-> GGUF (llama, qwen2, qwen3), llama\n"
             "models without biases -> llama2.c; q/k rows are reordered between RoPE layouts, a llama2.c model's\n"
             "tok*.bin becomes GGUF tokenizer.ggml.* arrays, a safetensors OUT directory gets IN's tokenizer.json,\n"
             "tokenizer_config.json, generation_config.json, special_tokens_map.json (and tokenizer.model) and a\n"
             "config.json whose torch_dtype is what was written; a Hugging Face tokenizer.json becomes GGUF\n"
             "tokenizer.ggml.* arrays and a GGUF's tokenizer a safetensors directory's tokenizer.json (SentencePiece\n"
             "BPE and byte-level BPE; a tokenizer that cannot be converted is a warning, the model is still written).\n"
             "  llama2.c .bin        legacy v0 (run.c) and version-1 float32 exports\n"
             "  safetensors          a Hugging Face directory (config.json + model.safetensors, or shards with\n"
             "                       model.safetensors.index.json) or a .safetensors file with config.json beside\n"
             "                       it; F32/F16/BF16; LLaMA, Mistral, Qwen2, Qwen3. OUT ending in .safetensors is\n"
             "                       one file (config.json written beside it; not into IN's own directory),\n"
             "                       anything else a directory (shards when IN was sharded, index, config.json)\n"
             "  GGUF                 llama (and Mistral), qwen2, qwen3; F32/F16/BF16 tensors; Q4_0 / Q8_0 are dequantized,\n"
             "                       other quantized types refused\n",
    .operands = {{"IN", offsetof(rotate_opts, in)}, {"OUT", offsetof(rotate_opts, out)}},
    .usage_on_excess = 1,
    .uses = {{&qx_opts_rotation_group, offsetof(rotate_opts, rot),
              QX_ROTATION_KIND | QX_ROTATION_CONTEXT | QX_ROTATION_ROTATIONS | QX_ROTATION_SEED | QX_ROTATION_BLOCK | QX_ROTATION_NO_R2 | QX_ROTATION_TP |
                  QX_ROTATION_STRICT, "options:"},
             {&rotate_group, 0, 0, NULL},
             {&qx_opts_common_group, offsetof(rotate_opts, c), QX_COMMON_THREADS | QX_COMMON_FORCE | QX_COMMON_QUIET, NULL}},
    .epilog =
        "online hook file (with --online or --r3): written beside the output, OUT.quarot-online for a file,\n"
        "OUT/quarot_online.txt for a directory, in quarot.h's text format (quarot_online_read parses it;\n"
        "docs/formats.md). Each line `hook LAYER SITE size= outer= n= inner= K= m= signs=` asks\n"
        "the engine to transform, in that layer, the activation row at SITE -- down_input: the input of\n"
        "down_proj; o_input: the input of o_proj; q_rope / k_rope: q and k after RoPE -- viewed as\n"
        "[outer][n][inner], every vector along n becoming v * D * H_n / sqrt(n), H_n = H_K (x) H_{2^m} (H_K\n"
        "given in the file; D = diag(signs), or none for signs=-). Without these transforms the rotated\n"
        "model computes something else. Its `weights qxh64:...` line is the digest of the model's weight\n"
        "files: quarot eval / plot / inspect / calibrate find the hook file beside MODEL (or --hooks FILE),\n"
        "refuse one whose digest does not match and apply it; GGUF and safetensors outputs also carry the\n"
        "metadata key quarot.online_hooks, so running them without their hook file gets a loud warning.\n"
        "\n"
        "memory: IN is memory-mapped and processed one decoder layer at a time (writable copies of one\n"
        "layer, in f32 for f16/bf16 inputs, written and freed as soon as the layer is done); a large\n"
        "embedding and lm_head stream through in row windows of about 4 MiB (safetensors and GGUF outputs,\n"
        "families without mean baking), so the peak is about one decoder layer; otherwise one layer plus\n"
        "the embeddings and lm_head (the summary says which). Every tensor's name, shape and dtype is\n"
        "validated before anything is written; NaN/Inf are found as each layer is copied and stop the run\n"
        "there (the error names tensor and row, nothing is published); IN is never modified. Weights\n"
        "written as f16/bf16 are rotated in f32 arithmetic (error ~log2(n) 2^-24, below their rounding;\n"
        "--f64 for double), f32 outputs in double. Every output file is built in a hidden\n"
        "directory beside OUT (.OUT.tmp-XXXXXX; one a killed run left is removed by the next run) and\n"
        "published all at once: a directory OUT appears (or replaces the old one, whose other files are\n"
        "kept) with one rename; for a file OUT the hook file goes first and the model last, so a kill in\n"
        "between leaves the old model beside a hook file whose digest it refuses. An existing OUT is only\n"
        "replaced with --force, and only if it is a regular file (a directory for directory outputs);\n"
        "without --force a file that appears at OUT meanwhile is not replaced either. Values beyond the\n"
        "range of --dtype f16/bf16 are an error naming the tensor, never Inf in the output.\n"
        "\n"
        "Prints a summary on stdout (the rotations built, the hook count, the files written).\n"
        "Exit codes: 0 ok, 1 usage, 2 input (missing, malformed or unsupported IN), 3 output (exists\n"
        "without --force, cannot be written, a name over 255 bytes), 4 cannot rotate as asked (e.g. a value\n"
        "the --dtype cannot hold), 5 internal or out of memory (docs/tool.md, \"Exit codes\").\n",
};

static int cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

/* "0,3,5-7" -> sorted distinct layer indices >= 0 (the upper bound is checked against the model in
   qx_rotate_job_run); 0 on error (usage error printed). */
static int parse_layers(qx_cli* cli, const char* s, int64_t** out, int64_t* n_out) {
    const char* p = s;
    int64_t i, n = 0, cap = 0, k;
    int64_t* list = NULL;
    if (!s[0]) return qx_cli_fail(cli, QX_EXIT_USAGE, "--down-proj-online-layers: empty list"), 0;
    for (;;) {
        char* end;
        long long a, b;
        errno = 0;
        a = strtoll(p, &end, 10);
        b = a;
        if (end == p || errno || *p == '-' || *p == '+' || *p == ' ') goto bad;
        if (*end == '-') {
            const char* q = end + 1;
            if (*q < '0' || *q > '9') goto bad;
            b = strtoll(q, &end, 10);
            if (errno || b < a) goto bad;
        }
        if (b - a > (int64_t)1 << 20) {
            qx_cli_fail(cli, QX_EXIT_USAGE, "--down-proj-online-layers: range %lld-%lld is too long", (long long)a, (long long)b);
            free(list);
            return 0;
        }
        for (i = a; i <= b; ++i) {
            if (n == cap) {
                int64_t nc = cap ? 2 * cap : 16;
                int64_t* q = (int64_t*)realloc(list, (size_t)nc * sizeof *q);
                if (!q) { free(list); return qx_cli_fail(cli, QX_EXIT_INTERNAL, "out of memory"), 0; }
                list = q;
                cap = nc;
            }
            list[n++] = i;
        }
        if (*end == '\0') break;
        if (*end != ',') goto bad;
        p = end + 1;
    }
    qsort(list, (size_t)n, sizeof *list, cmp_i64);
    for (i = k = 0; i < n; ++i)
        if (k == 0 || list[i] != list[k - 1]) list[k++] = list[i];
    *out = list;
    *n_out = k;
    return 1;
bad:
    free(list);
    qx_cli_fail(cli, QX_EXIT_USAGE, "--down-proj-online-layers: '%s' is not a list like 0,3,5-7", s);
    return 0;
}

typedef struct rotate_progress {
    qx_cli* cli;
    const char* stage;
    const char* in;              /* the input (QX_FAULT_TRUNCATE_INPUT) */
} rotate_progress;

static void on_progress(void* user, const char* stage, int64_t done, int64_t total) {
    rotate_progress* rp = (rotate_progress*)user;
    char what[64];
    if (!rp->stage || strcmp(rp->stage, stage) != 0) {
        if (rp->stage) {
            snprintf(what, sizeof what, "%s", strcmp(rp->stage, "validate") == 0 ? "validation" : "rotation");
            qx_cli_progress_end(rp->cli, what);
        }
        rp->stage = stage;
        qx_cli_phase(rp->cli);
    }
    snprintf(what, sizeof what, "%s layer", strcmp(stage, "validate") == 0 ? "validating" : "rotating");
    qx_cli_progress(rp->cli, done, total, what);
    /* fault injection (tests): truncate the mapped input once the output files exist */
    if (rp->in && strcmp(stage, "rotate") == 0 && done == 1 && getenv("QX_FAULT_TRUNCATE_INPUT") && !qx_is_dir(rp->in))
        (void)!truncate(rp->in, 4096);
}

static char* concat(const char* a, const char* b) {
    char* p = (char*)malloc(strlen(a) + strlen(b) + 1);
    if (p) { strcpy(p, a); strcat(p, b); }
    return p;
}

/* The largest shard file an index lists (0 when IN is not a sharded directory): the output is
   split with the same maximum shard size, as Hugging Face's max_shard_size would. */
static uint64_t largest_shard(const char* dir) {
    char* idx = qx_path_join(dir, "model.safetensors.index.json");
    char* text = NULL;
    size_t len = 0, i;
    qx_json_doc doc;
    uint64_t best = 0;
    qx_err e;
    if (!idx) return 0;
    if (qx_path_exists(idx) && qx_read_file(idx, (size_t)64 << 20, &text, &len, &e) == QUAROT_OK &&
        qx_json_parse(text, len, idx, NULL, &doc, &e) == QUAROT_OK) {
        const qx_json* wm = qx_json_get(doc.root, "weight_map");
        if (wm && wm->type == QX_JSON_OBJECT)
            for (i = 0; i < wm->count; ++i) {
                const char* name = qx_json_as_string(&wm->items[i], NULL);
                char* p = name && qx_is_plain_filename(name) ? qx_path_join(dir, name) : NULL;
                struct stat st;
                if (p && stat(p, &st) == 0 && (uint64_t)st.st_size > best) best = (uint64_t)st.st_size;
                free(p);
            }
        qx_json_doc_free(&doc);
    }
    free(text);
    free(idx);
    return best;
}

static const char* dir_model_files[] = {"config.json", "model.safetensors", "model.safetensors.index.json", "quarot_online.txt"};

/* The format family of a source_format: "llama2c", "safetensors" or "gguf". */
static const char* format_family(const char* src_format) {
    return strncmp(src_format, "llama2c", 7) == 0 ? "llama2c" : strncmp(src_format, "safetensors", 11) == 0 ? "safetensors" : "gguf";
}

/* Checks the Hugging Face side files (QX_CONVERT_HF_FILES) that exist in src_dir against out_dir:
   none may overwrite a file without force (qx_rotate_file copies them into the staged output
   directory). The number found, -1 when one would overwrite (e says why). */
static int check_hf_files(const char* src_dir, const char* out_dir, int force, qx_err* e) {
    int k, n = 0, bad = 0;
    for (k = 0; QX_CONVERT_HF_FILES[k] && !bad; ++k) {
        char* from = qx_path_join(src_dir, QX_CONVERT_HF_FILES[k]);
        char* to = qx_path_join(out_dir, QX_CONVERT_HF_FILES[k]);
        if (!from || !to) { qx_err_set(e, "out of memory"); bad = 1; }
        else if (qx_path_exists(from)) {
            ++n;
            if (!force && qx_path_exists(to)) { qx_err_set(e, "%s: exists already; use --force to replace it", to); bad = 1; }
        }
        free(from);
        free(to);
    }
    return bad ? -1 : n;
}

/* Whether a llama2.c checkpoint can hold the model (run.c's architecture), with the reason if not. */
static const char* l2c_unfit(const quarot_model_config* c) {
    int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
    if (strcmp(c->arch, "llama") != 0) return "llama2.c holds llama models only";
    if (c->attn_qkv_bias || c->attn_out_bias || c->mlp_bias || c->qk_norm) return "llama2.c has no biases or q/k norms";
    if (hd * c->n_heads != c->hidden) return "llama2.c needs head_dim * n_heads == hidden";
    return NULL;
}

/* ---- qx_rotate_job_run, step by step ---- */

/* What one job reads, decides and builds; rj_free frees it all. */
typedef struct rj_run {
    qx_cli* cli;
    const qx_rotate_job* job;
    int adapt;                     /* Adapt Rotation stage 2 */
    int learned;                   /* learned R1 / R2 (job->learned) */
    double orth_worst;             /* the learned rotations' orthogonality error before use */
    int hooks;                     /* --online / --r3: a hook file is written */
    qx_store s;                    /* the input (views of read-only mappings) */
    quarot_online_list list;
    char src_format[32];
    const char* ext_fmt;           /* the format OUT's name says, or NULL */
    const char* family;            /* OUT's format family: "llama2c", "safetensors" or "gguf" */
    char out_format[32];
    int dir_out;                   /* a safetensors directory */
    const char* tok_note;          /* what became of the tokenizer (the summary), or NULL */
    char tok_path[4096], tok_note_buf[4200];
    int tok_warn;                  /* the tokenizer could not be converted (a warning) */
    int tok_to_hf;                 /* GGUF -> safetensors: the tokenizer becomes tokenizer.json */
    char* tok_dir;                 /* GGUF -> safetensors directory: the converted tokenizer files, staged here */
    char* hf_src;                  /* the Hugging Face side files to copy into OUT (ro.side_dir) */
    int n_hf_files;
    char* hooks_path;
    char* config_path;             /* a single .safetensors OUT: its config.json */
    qx_rotcheck_dim dims[8];
    int n_dims;
    int64_t n_vision;              /* vision tower tensors (Qwen2-VL), merger output projection included */
    uint64_t vision_bytes;         /* their bytes in IN */
    int gguf_vl;                   /* a llama.cpp qwen2vl text GGUF (its mmproj: job->mmproj, or not rotated) */
    qx_out mmproj;                 /* job->mmproj's rotated copy, staged by rj_on_rotations */
    int mmproj_staged;
    int mmproj_failed, mmproj_out_failed;   /* staging it failed (writing it: an output error; else its input) */
    qx_rotate_file_stats st;
    qx_err e;
} rj_run;

static void rj_free(rj_run* j) {
    int k;
    if (j->tok_dir) {   /* the scratch copies of the converted tokenizer files */
        for (k = 0; k < 2; ++k) {
            char* f = qx_path_join(j->tok_dir, k == 0 ? "tokenizer.json" : "tokenizer_config.json");
            if (f) (void)remove(f);
            free(f);
        }
        (void)rmdir(j->tok_dir);
        free(j->tok_dir);
    }
    quarot_online_list_free(&j->list);
    free(j->hf_src);
    free(j->hooks_path);
    free(j->config_path);
    qx_store_free(&j->s);
}

/* Never silent: a warning line on stderr, after any progress line. */
static void rj_warn_line(qx_cli* cli) {
    if (cli->progress_open) { fputc('\n', stderr); cli->progress_open = 0; }
}

/* What the job asks, checked before the input is opened. */
static int rj_check_job(const rj_run* j) {
    const qx_rotate_job* job = j->job;
    if (job->format && j->ext_fmt && strcmp(job->format, j->ext_fmt) != 0)
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "%s: the name ends in .%s but --format is %s (name OUT after its format: .bin llama2c, "
                                                  ".gguf, .safetensors or a directory)", job->out,
                           strcmp(j->ext_fmt, "llama2c") == 0 ? "bin" : j->ext_fmt, job->format);
    if (qx_same_file(job->in, job->out))
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: is the input; the input is never modified (choose another OUT)", job->out);
    if (j->adapt && (!job->context || !job->context->matrix))
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "Adapt Rotation stage 2 needs the context of stage 1: run `quarot calibrate` (stage 1) first");
    if (j->learned && (!job->learned || !job->learned->r1))
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "--rotation learned needs --rotations FILE (quarot calibrate --method spinquant writes one)");
    return QX_EXIT_OK;
}

/* IN, loaded as views of read-only mappings; a SIGBUS (the mapped input truncated meanwhile) becomes
   an error line, the temporaries removed. An input that runs with online hooks cannot be rotated
   again into one file: the output would need its hooks and the new ones at the same sites. */
static int rj_load_input(rj_run* j) {
    static char bus_what[1100];
    const char* in = j->job->in;
    qx_hooks_status hs = QX_HOOKS_NONE;
    char used[1024];
    qx_load_opts lo;
    quarot_result r;
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(in, &lo, &j->s, &j->e);
    if (r != QUAROT_OK) return qx_cli_fail(j->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", j->e.msg);
    snprintf(j->src_format, sizeof j->src_format, "%s", j->s.source_format);
    j->n_vision = strcmp(j->s.config.arch, "qwen2vl") == 0 ? qx_vl_tensor_count(&j->s) : 0;
    {
        int64_t i;
        for (i = 0; j->n_vision > 0 && i < j->s.count; ++i)
            if (strncmp(j->s.items[i].name, "visual.", 7) == 0) j->vision_bytes += quarot_tensor_nbytes(&j->s.items[i].t);
    }
    j->gguf_vl = qx_store_get_blob(&j->s, "gguf.vl", NULL) != NULL;
    snprintf(bus_what, sizeof bus_what, "quarot rotate: %.1000s", in);
    qx_sigbus_cleanup(bus_what);
    r = qx_model_hooks_attach(&j->s, in, NULL, &hs, used, sizeof used, &j->e);
    if (r != QUAROT_OK) return qx_cli_fail(j->cli, QX_EXIT_INPUT, "%s", j->e.msg);
    if (hs != QX_HOOKS_NONE)
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: runs with online hooks (%s); rotating it again would need those and the new ones at "
                                                    "the same sites: rotate the original model", in,
                           hs == QX_HOOKS_MISSING ? "its metadata says so" : used);
    return QX_EXIT_OK;
}

/* OUT's format: --format, else its extension, else IN's (qx_convert.h); refused when it cannot
   hold the architecture. */
static int rj_pick_format(rj_run* j) {
    const quarot_model_config* c = &j->s.config;
    const char* out = j->job->out;
    j->family = j->job->format ? j->job->format : j->ext_fmt ? j->ext_fmt : format_family(j->src_format);
    if (strcmp(j->family, "llama2c") == 0)
        snprintf(j->out_format, sizeof j->out_format, "%s", strcmp(j->src_format, "llama2c-v1") == 0 ? "llama2c-v1" : "llama2c-v0");
    else
        snprintf(j->out_format, sizeof j->out_format, "%s", j->family);
    if (strcmp(j->family, "llama2c") == 0 && l2c_unfit(c))
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: architecture %s cannot be written as llama2.c: %s", out, c->arch, l2c_unfit(c));
    if (j->job->text_only && j->n_vision == 0)
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "--text-only: %s (%s) has no vision tower to leave out (it is for Hugging Face Qwen2-VL / "
                                                  "Qwen2.5-VL checkpoints)", j->job->in, c->arch);
    if (j->job->text_only && strcmp(j->family, "gguf") != 0)
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "--text-only: for a GGUF OUT (llama.cpp's qwen2vl text model); a %s OUT keeps the vision "
                                                  "tower", j->family);
    if (strcmp(j->family, "gguf") == 0 && j->n_vision > 0 && !j->job->text_only)
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: %s has a vision tower (%lld tensors), which llama.cpp keeps in a separate mmproj "
                                                    "file this tool does not write: rotate it to safetensors, or --text-only writes the text "
                                                    "decoder alone", out, c->arch, (long long)j->n_vision);
    if (strcmp(j->family, "gguf") == 0 && !qx_gguf_arch_supported(c->arch, NULL))
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: architecture %s cannot be written as GGUF here (llama, qwen2, qwen3)", out, c->arch);
    if (j->job->mmproj && !j->gguf_vl)
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "--mmproj: %s is not a llama.cpp qwen2vl text GGUF (the mmproj belongs to one)", j->job->in);
    if (j->gguf_vl && strcmp(j->family, "gguf") != 0)
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: %s is the text decoder of a llama.cpp qwen2vl model (its vision tower is in a separate "
                                                    "mmproj file); it is written back as GGUF only", out, j->job->in);
    return QX_EXIT_OK;
}

/* Vision-language models, never silent: what the rotation does with the vision tower. */
static int rj_vision_note(rj_run* j) {
    const char* in = j->job->in;
    if (j->n_vision > 0 && j->job->text_only) {   /* never silent, even with --quiet */
        rj_warn_line(j->cli);
        fprintf(stderr, "quarot rotate: --text-only: %s: the text decoder only; the vision tower (%lld tensors, %llu bytes) is not "
                        "written. Its merger output projection (%s, %s) is rotated by R1 with the text stream: image embeddings enter "
                        "this model right only through the vision tower with that rotated merger (`quarot rotate IN DIR` with the same "
                        "rotation options writes it), so with the original vision tower only text prompts are right\n",
                j->job->out, (long long)j->n_vision, (unsigned long long)j->vision_bytes, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS);
    } else if (j->n_vision > 0) {
        qx_cli_info(j->cli, "%s: vision tower: %lld tensors kept unrotated (they read only the vision activations); the merger's "
                            "output projection (%s, %s) rotated on its output side so image embeddings enter the rotated stream",
                    in, (long long)(j->n_vision - 2), QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS);
    }
    if (j->gguf_vl && !j->job->mmproj) {   /* with --mmproj: said once both files are written (rj_print_work) */
        if (j->job->strict)
            return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: --strict: a qwen2vl text GGUF: its mmproj file (the vision tower) is not rotated "
                                                        "here, so the output is only right for text-only prompts", in);
        rj_warn_line(j->cli);
        fprintf(stderr, "quarot rotate: warning: %s is the text decoder of a qwen2vl model: only it is rotated. Its mmproj file (the "
                        "vision tower) is not read or rotated here; the merger's output projection in it (mm.2.weight, mm.2.bias) would "
                        "need R1 on its output side, so with the old mmproj image embeddings enter the rotated stream unrotated and "
                        "image prompts are wrong (--mmproj FILE --mmproj-out FILE rotates it). The output is right for text-only "
                        "prompts (--strict makes this an error)\n", in);
    }
    return QX_EXIT_OK;
}

/* Into GGUF from another format: the metadata from the config, and the vocabulary (llama2.c's
   tok*.bin if found beside IN, a Hugging Face tokenizer.json) as tokenizer.ggml.* arrays. */
static int rj_gguf_metadata(rj_run* j) {
    const char* in = j->job->in;
    qx_sb kv;
    int have_tok = strcmp(format_family(j->src_format), "llama2c") == 0 &&
                   qx_tokenizer_find_bin(in, j->s.config.vocab, j->tok_path, sizeof j->tok_path, NULL, 0);
    int from_st = strncmp(j->src_format, "safetensors", 11) == 0;
    int tc = QX_TOKCONV_NONE;
    quarot_result r;
    memset(&kv, 0, sizeof kv);
    r = qx_convert_gguf_kv(&j->s, have_tok ? j->tok_path : NULL, &kv, &j->e);
    if (r == QUAROT_OK && from_st) {   /* tokenizer.json -> tokenizer.ggml.* */
        char* sd = qx_is_dir(in) ? qx_path_join(in, ".") : qx_path_dir(in);
        tc = sd ? qx_convert_tok_to_gguf(sd, j->s.config.vocab, &kv, j->tok_note_buf, sizeof j->tok_note_buf, &j->e) : QX_TOKCONV_ERROR;
        if (!sd) qx_err_set(&j->e, "out of memory");
        if (tc == QX_TOKCONV_ERROR) r = QUAROT_ERR_OUT_OF_MEMORY;
        j->tok_warn = tc == QX_TOKCONV_UNFIT;
        free(sd);
    }
    if (r == QUAROT_OK) r = qx_store_set_blob(&j->s, "gguf.kv", kv.p, kv.len);
    qx_sb_free(&kv);
    if (r != QUAROT_OK) return qx_cli_fail(j->cli, qx_cli_exit_for(r), "%s", j->e.msg);
    if (from_st) {
        j->tok_note = j->tok_note_buf;
    } else if (have_tok) {
        snprintf(j->tok_note_buf, sizeof j->tok_note_buf, "%s -> tokenizer.ggml.* (SentencePiece \"llama\", %lld tokens)", j->tok_path,
                 (long long)j->s.config.vocab);
        j->tok_note = j->tok_note_buf;
    } else {
        j->tok_note = "none found beside IN (tok<vocab>.bin, tok512.bin, tokenizer.bin): no tokenizer.ggml.* keys";
    }
    return QX_EXIT_OK;
}

/* A conversion into another format family: llama2.c's RoPE tables dropped (they are not model
   weights elsewhere) and the metadata and tokenizer carried over where the format can hold them. */
static int rj_convert(rj_run* j) {
    const char* src_family = format_family(j->src_format);
    int64_t i = 0;
    if (strcmp(j->family, src_family) == 0) return QX_EXIT_OK;
    if (strcmp(j->family, "llama2c") != 0)
        while (i < j->s.count) {
            if (strncmp(j->s.items[i].name, "llama2c.", 8) == 0) (void)qx_store_remove(&j->s, j->s.items[i].name);
            else ++i;
        }
    if (strcmp(j->family, "gguf") == 0) return rj_gguf_metadata(j);
    if (strcmp(j->family, "llama2c") == 0) j->tok_note = "not written (llama2.c keeps its vocabulary in a separate tok*.bin)";
    else if (strcmp(src_family, "gguf") == 0) j->tok_to_hf = 1;   /* rj_tokenizer_to_hf, once OUT is known to be a directory */
    else j->tok_note = "not converted (llama2.c tokenizer.bin -> tokenizer.json is not supported)";
    return QX_EXIT_OK;
}

/* What the model must allow for this job: RMSNorm, llama2.c's f32, the listed layers, the
   context's hidden size, the learned rotations (this model's digest and shapes, orthogonal). */
static int rj_check_model(rj_run* j) {
    const qx_rotate_job* job = j->job;
    const quarot_model_config* c = &j->s.config;
    if (c->norm == QUAROT_NORM_LAYER)
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: architecture %s: a rotated LayerNorm model needs RMSNorm, which its format "
                                                    "cannot express (rotate it in memory: quarot eval)", job->in, c->arch);
    if (strcmp(j->family, "llama2c") == 0 && job->dtype != QUAROT_DTYPE_DEFAULT && job->dtype != QUAROT_DTYPE_F32)
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "--dtype: llama2.c checkpoints are float32 only");
    if (job->down_proj_online == QUAROT_LAYERS_LIST && job->n_layers > 0 && job->layers[job->n_layers - 1] >= c->n_layers)
        return qx_cli_fail(j->cli, QX_EXIT_USAGE, "%s: layer %lld out of range (the model has %lld layers, 0..%lld)",
                           job->layers_what ? job->layers_what : "--down-proj-online-layers", (long long)job->layers[job->n_layers - 1],
                           (long long)c->n_layers, (long long)(c->n_layers - 1));
    if (j->adapt && job->context->hidden != c->hidden)
        return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: the Adapt Rotation context (%s) is for hidden size %lld, the model has %lld", job->in,
                           job->context_name ? job->context_name : "stage 1", (long long)job->context->hidden, (long long)c->hidden);
    if (j->learned) {
        char digest[QX_DIGEST_LEN];
        quarot_result r = qx_spin_model_digest(job->in, digest, &j->e);
        if (r == QUAROT_OK) r = qx_spin_check(job->learned, c, digest, &j->orth_worst, &j->e);
        if (r != QUAROT_OK)
            return qx_cli_fail(j->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_IO ? QX_EXIT_INPUT : QX_EXIT_PROCESS,
                               "%s: %s: %s", job->in, job->learned_name ? job->learned_name : "learned rotations", j->e.msg);
    }
    return QX_EXIT_OK;
}

/* No silent fallbacks: what each rotated dimension gets, before any work (a warning, or with
   --strict an error). */
static int rj_check_dims(rj_run* j) {
    const qx_rotate_job* job = j->job;
    qx_rotcheck_opts co;
    int k;
    memset(&co, 0, sizeof co);
    co.rotation = job->rotation;
    co.block_size = j->adapt ? job->context->block : job->block_size;
    co.no_r2 = job->no_r2;
    co.online = job->online;
    co.r3 = job->r3;
    co.max_tp_size = job->max_tp_size;
    j->n_dims = qx_rotcheck(&j->s.config, &co, j->dims, 8);
    for (k = 0; k < j->n_dims; ++k) {
        const qx_rotcheck_dim* d = &j->dims[k];
        if (!d->warn) continue;
        if (job->strict) return qx_cli_fail(j->cli, QX_EXIT_PROCESS, "%s: --strict: %s (%lld): %s", job->in, d->what, (long long)d->dim, d->text);
        rj_warn_line(j->cli);
        fprintf(stderr, "quarot rotate: warning: %s (%lld): %s (--strict makes this an error)\n", d->what, (long long)d->dim, d->text);
    }
    return QX_EXIT_OK;
}

/* A safetensors directory OUT: not a file, and no model in it unless --force. */
static int rj_check_dir_output(const rj_run* j) {
    const char* out = j->job->out;
    int k;
    if (qx_path_exists(out) && !qx_is_dir(out))
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: exists and is not a directory (a safetensors output not ending in .safetensors is a "
                                                   "directory)", out);
    for (k = 0; k < 4 && !j->job->force && qx_is_dir(out); ++k) {
        char* f = qx_path_join(out, dir_model_files[k]);
        int ex = f && qx_path_exists(f);
        free(f);
        if (ex) return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: holds a model already (%s); use --force to replace it", out, dir_model_files[k]);
    }
    return QX_EXIT_OK;
}

/* A file OUT: not a directory, not replaced without --force; a single .safetensors file gets its
   config.json beside it, which must not be the input's own. */
static int rj_check_file_output(rj_run* j) {
    const char *in = j->job->in, *out = j->job->out;
    int force = j->job->force;
    char *od, *id;
    int own;
    if (qx_is_dir(out)) return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: is a directory (expected a file name)", out);
    if (!force && qx_path_exists(out)) return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", out);
    if (strcmp(j->family, "safetensors") != 0) return QX_EXIT_OK;
    od = qx_path_dir(out);
    id = qx_is_dir(in) ? NULL : qx_path_dir(in);
    j->config_path = od ? qx_path_join(od, "config.json") : NULL;
    own = od && strncmp(j->src_format, "safetensors", 11) == 0 && (qx_is_dir(in) ? qx_same_file(od, in) : (id && qx_same_file(od, id)));
    free(od);
    free(id);
    if (own)
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: its config.json would be the input's own, which would not match the rotated model; "
                                                   "write to a directory (OUT without .safetensors) or elsewhere", out);
    if (!j->config_path) return qx_cli_fail(j->cli, QX_EXIT_INTERNAL, "out of memory");
    if (!force && qx_path_exists(j->config_path))
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", j->config_path);
    return QX_EXIT_OK;
}

/* A GGUF's tokenizer becomes tokenizer.json + tokenizer_config.json of a safetensors directory:
   written into a scratch directory beside OUT, copied and published with the weights (side_dir). */
static int rj_tokenizer_to_hf(rj_run* j) {
    const char* out = j->job->out;
    char* od;
    char* tmpl;
    int tc;
    if (!j->tok_to_hf) return QX_EXIT_OK;
    if (!j->dir_out) {
        j->tok_note = "not written (a single .safetensors file has no tokenizer; write to a directory to get tokenizer.json)";
        return QX_EXIT_OK;
    }
    od = qx_path_dir(out);
    tmpl = od ? qx_path_join(od, ".quarot-tok-XXXXXX") : NULL;
    free(od);
    if (!tmpl || !mkdtemp(tmpl)) {
        int rc = qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: cannot create a scratch directory for the tokenizer files", tmpl ? tmpl : out);
        free(tmpl);
        return rc;
    }
    j->tok_dir = tmpl;
    tc = qx_convert_tok_to_hf(j->job->in, j->s.config.vocab, j->tok_dir, j->tok_note_buf, sizeof j->tok_note_buf, &j->e);
    if (tc == QX_TOKCONV_ERROR) return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s", j->e.msg);
    j->tok_warn = tc == QX_TOKCONV_UNFIT;
    j->tok_note = j->tok_note_buf;
    if (tc != QX_TOKCONV_DONE) return QX_EXIT_OK;
    j->hf_src = qx_path_join(j->tok_dir, ".");
    if (!j->hf_src) return qx_cli_fail(j->cli, QX_EXIT_INTERNAL, "out of memory");
    if (qx_is_dir(out) && (j->n_hf_files = check_hf_files(j->hf_src, out, j->job->force, &j->e)) < 0)
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s", j->e.msg);
    return QX_EXIT_OK;
}

/* A Hugging Face output directory gets the input's tokenizer and generation files. */
static int rj_hf_side_files(rj_run* j) {
    const char *in = j->job->in, *out = j->job->out;
    if (!j->dir_out || strncmp(j->src_format, "safetensors", 11) != 0) return QX_EXIT_OK;
    j->hf_src = qx_is_dir(in) ? qx_path_join(in, ".") : qx_path_dir(in);
    if (!j->hf_src) return qx_cli_fail(j->cli, QX_EXIT_INTERNAL, "out of memory");
    if (qx_is_dir(out) && (j->n_hf_files = check_hf_files(j->hf_src, out, j->job->force, &j->e)) < 0)
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s", j->e.msg);
    return QX_EXIT_OK;
}

/* The output paths: OUT itself (a directory or a file), the tokenizer and side files a directory
   gets, and the hook file. Without online rotation a hook file left from an earlier run would be
   wrong for the new model: it counts as an output (refused without --force, removed after success
   with it). */
static int rj_check_outputs(rj_run* j) {
    const char* out = j->job->out;
    int rc;
    if (strcmp(j->family, "safetensors") == 0) j->dir_out = !(j->ext_fmt && strcmp(j->ext_fmt, "safetensors") == 0);
    rc = j->dir_out ? rj_check_dir_output(j) : rj_check_file_output(j);
    if (rc == QX_EXIT_OK) rc = rj_tokenizer_to_hf(j);
    if (rc != QX_EXIT_OK) return rc;
    if (j->tok_warn) {   /* never silent: stderr now, the summary below */
        rj_warn_line(j->cli);
        fprintf(stderr, "quarot rotate: warning: tokenizer %s\n", j->tok_note);
    }
    if ((rc = rj_hf_side_files(j)) != QX_EXIT_OK) return rc;
    j->hooks_path = j->dir_out ? qx_path_join(out, "quarot_online.txt") : concat(out, ".quarot-online");
    if (!j->hooks_path) return qx_cli_fail(j->cli, QX_EXIT_INTERNAL, "out of memory");
    if (!j->job->force && qx_path_exists(j->hooks_path))
        return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", j->hooks_path);
    return QX_EXIT_OK;
}

/* The rotation. Adapt Rotation stage 2: R1 = H*R_best with H rebuilt from the context's seed and
   block (the processor takes both from desc.context); R2 Hadamard with the same seed, so a context
   holding R = I gives exactly `--rotation hadamard --seed <its seed>`. */
static void rj_rotate_desc(rj_run* j, quarot_rotate_desc* desc) {
    const qx_rotate_job* job = j->job;
    memset(desc, 0, sizeof *desc);
    desc->rotation = job->rotation == QUAROT_ROTATION_DEFAULT ? QUAROT_ROTATION_HADAMARD : job->rotation;
    desc->r2_rotation = j->adapt ? QUAROT_ROTATION_HADAMARD : desc->rotation;
    desc->seed = j->adapt ? job->context->seed : job->seed;
    desc->context = j->adapt ? job->context : NULL;
    desc->block_size = job->block_size;
    desc->no_r2 = job->no_r2;
    desc->online = job->online;
    desc->r3 = job->r3;
    desc->max_tp_size = job->max_tp_size;
    if (job->down_proj_online == QUAROT_LAYERS_LIST) {
        desc->down_proj_online = QUAROT_LAYERS_LIST;
        desc->down_proj_online_layers = job->layers;
        desc->n_down_proj_online_layers = job->n_layers;
    } else if (job->down_proj_online == QUAROT_LAYERS_NONE) {
        desc->down_proj_online = QUAROT_LAYERS_NONE;
    }
    if (j->learned) qx_spin_desc(job->learned, desc);   /* R1 MATRIX, one R2 per layer */
    if (j->hooks) desc->online_out = &j->list;
}

/* The mmproj's rotated copy, staged with the processor's R1 before OUT is opened. */
static quarot_result rj_on_rotations(void* user, const quarot_processor* p, qx_err* e) {
    rj_run* j = (rj_run*)user;
    const quarot_rotation* r1 = p->have_rot[QUAROT_ROT_R1] ? &p->rot[QUAROT_ROT_R1] : NULL;
    quarot_result r = qx_gguf_mmproj_stage(&j->mmproj, j->job->mmproj, j->job->mmproj_out, j->s.config.hidden, r1, j->job->force,
                                           &j->mmproj_out_failed, e);
    j->mmproj_staged = r == QUAROT_OK;
    j->mmproj_failed = r != QUAROT_OK;
    return r;
}

/* qx_rotate_file layer by layer into OUT (through temporaries, published at the end). */
static int rj_rotate(rj_run* j) {
    const qx_rotate_job* job = j->job;
    quarot_rotate_desc desc;
    qx_rotate_file_opts ro;
    rotate_progress rp;
    quarot_result r;
    int rc;
    rj_rotate_desc(j, &desc);
    memset(&ro, 0, sizeof ro);
    ro.out_path = job->out;
    ro.out_format = j->out_format;
    ro.force = job->force;
    ro.dtype = job->dtype;
    ro.hooks_path = j->hooks ? j->hooks_path : NULL;
    ro.config_path = j->config_path;
    ro.side_dir = j->hf_src;   /* copied into the output directory and published with it */
    ro.drop_pages = 1;
    ro.threads = job->threads;
    ro.f64_arithmetic = job->f64;
    ro.leave_out = job->text_only ? "visual." : NULL;
    if (j->dir_out && strcmp(j->src_format, "safetensors-dir") == 0) ro.shard_bytes = largest_shard(job->in);   /* 0: one file */
    memset(&rp, 0, sizeof rp);
    rp.cli = j->cli;
    rp.in = job->in;
    ro.progress = on_progress;
    ro.user = &rp;
    if (job->mmproj) {
        ro.on_rotations = rj_on_rotations;
        ro.rotations_user = j;
    }
    qx_cli_phase(j->cli);
    r = qx_rotate_file(&j->s, &desc, &ro, &j->st, &j->e);
    if (j->mmproj_staged) {   /* published with OUT, removed without it */
        quarot_result pr = r == QUAROT_OK ? qx_out_publish(&j->mmproj, &j->e) : QUAROT_OK;
        qx_out_abort(&j->mmproj);   /* removes an unpublished temporary; frees the paths */
        j->mmproj_staged = 0;
        if (pr != QUAROT_OK) return qx_cli_fail(j->cli, QX_EXIT_OUTPUT, "%s (%s was written; its mmproj was not)", j->e.msg, job->out);
    }
    if (rp.stage) qx_cli_progress_end(j->cli, strcmp(rp.stage, "validate") == 0 ? "validation" : "rotation");
    j->n_hf_files = j->st.side_files;
    if (r == QUAROT_OK) return QX_EXIT_OK;
    /* a value beyond the output dtype's range (QUAROT_ERR_OVERFLOW, found as it is written): the output
       cannot hold this model, which is "cannot do as asked", not a write failure */
    rc = r == QUAROT_ERR_OVERFLOW ? QX_EXIT_PROCESS : j->st.output_error ? QX_EXIT_OUTPUT : qx_cli_exit_for(r);
    if (j->mmproj_failed) {   /* the mmproj: a bad file is bad input, like IN */
        rc = j->mmproj_out_failed ? QX_EXIT_OUTPUT : r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT;
        return qx_cli_fail(j->cli, rc, "%s", j->e.msg);
    }
    if (rc == QX_EXIT_OK) rc = QX_EXIT_INTERNAL;
    if (j->st.output_error) qx_cli_fail(j->cli, rc, "%s", j->e.msg);
    else qx_cli_fail(j->cli, rc, "%s: %s", job->in, j->e.msg);
    return rc;
}

/* The summary's first part (stdout): what was read and written, the format and tokenizer, the
   rotations built and what each rotated dimension got. */
static void rj_print_rotations(const rj_run* j) {
    const qx_rotate_job* job = j->job;
    const quarot_model_config* c = &j->s.config;
    const char *src = j->src_format, *dst = j->out_format;
    int k;
    printf("rotated %s (%s, %s, %lld layers, hidden %lld) -> %s\n", job->in, src, c->arch, (long long)c->n_layers, (long long)c->hidden, job->out);
    if (strcmp(dst, src) != 0 && !(strcmp(dst, "safetensors") == 0 && strcmp(src, "safetensors-dir") == 0))
        printf("  format: %s -> %s%s\n", src, dst,
               qx_convert_interleaved(dst, c->arch) != (c->rope_interleaved != 0) ? " (q/k rows reordered for its RoPE layout)" : "");
    if (j->tok_note) printf("  %s: %s\n", j->tok_warn ? "WARNING tokenizer" : "tokenizer", j->tok_note);
    if (j->n_hf_files > 0)
        printf("  copied %d Hugging Face file%s (tokenizer, generation config) into %s\n", j->n_hf_files, j->n_hf_files > 1 ? "s" : "", job->out);
    printf("  R1: %s\n  R2: %s\n", j->st.r1, job->no_r2 ? "off (--no-r2)" : j->st.r2);
    if (j->n_vision > 0 && job->text_only)
        printf("  vision tower: not written (--text-only): %lld tensors, %llu bytes; its merger output projection was rotated by R1 "
               "with the text stream, so image prompts need the vision tower of IN rotated with the same options (quarot rotate IN "
               "DIR), not the original's\n", (long long)j->n_vision, (unsigned long long)j->vision_bytes);
    else if (j->n_vision > 0)
        printf("  vision tower: %lld tensors kept unrotated; merger output projection rotated (%s, %s: R1 on the output side)\n",
               (long long)(j->n_vision - 2), QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS);
    if (j->gguf_vl && job->mmproj)
        printf("  vision (llama.cpp qwen2vl): mmproj %s -> %s, merger output projection mm.2 rotated by R1, the rest copied\n",
               job->mmproj, job->mmproj_out);
    else if (j->gguf_vl)
        printf("  WARNING vision: text decoder only (llama.cpp qwen2vl); the mmproj file is not rotated, so the output is right for "
               "text-only prompts\n");
    for (k = 0; k < j->n_dims; ++k)
        if (j->dims[k].fallback)
            printf("  %s %s (%lld): %s\n", j->dims[k].warn ? "WARNING" : "note", j->dims[k].what, (long long)j->dims[k].dim, j->dims[k].text);
    if (j->learned)
        printf("  learned rotations (%s): %s; orthogonality %.2e before use\n", job->learned_name ? job->learned_name : "in memory",
               job->learned->about, j->orth_worst);
    if (j->adapt)
        printf("  Adapt Rotation stage 2: R learned by stage 1 (%s): %s, seed %llu, block %lld, loss %.6e -> %.6e (%+.2f%%)\n",
               job->context_name ? job->context_name : "in memory", qx_calib_dtype(job->context), (unsigned long long)job->context->seed,
               (long long)job->context->block, job->context->start_loss, job->context->best_loss, 100.0 * qx_calib_reduction(job->context));
}

/* The summary's second part: the norms, the arithmetic, the online hooks, the files and the memory;
   then the hook file's note on stderr (or the removal of an earlier run's). */
static void rj_print_work(const rj_run* j) {
    const qx_rotate_file_stats* st = &j->st;
    const quarot_online_list* list = &j->list;
    quarot_dtype dtype = j->job->dtype;
    int64_t n_down = 0, n_o = 0, n_q = 0, n_k = 0, n_e = 0, n_sh = 0, h;
    double mib = 1.0 / (1024.0 * 1024.0);
    char line[400], moe[96];
    moe[0] = '\0';
    for (h = 0; h < list->count; ++h) {
        n_down += list->hooks[h].site == QUAROT_SITE_DOWN_INPUT;
        n_o += list->hooks[h].site == QUAROT_SITE_O_INPUT;
        n_q += list->hooks[h].site == QUAROT_SITE_Q_ROPE;
        n_k += list->hooks[h].site == QUAROT_SITE_K_ROPE;
        n_e += list->hooks[h].site == QUAROT_SITE_EXPERT_DOWN_INPUT;
        n_sh += list->hooks[h].site == QUAROT_SITE_SHARED_DOWN_INPUT;
    }
    if (st->fused_into_commands > 0)
        printf("  norms fused (%lld weight%s scaled by %s first rotate command, no pass of %s own); ", (long long)st->fused_into_commands,
               st->fused_into_commands == 1 ? "" : "s", st->fused_into_commands == 1 ? "its" : "their",
               st->fused_into_commands == 1 ? "its" : "their");
    else
        printf("  norms fused; ");
    printf("%lld rotate commands; %s\n", (long long)st->n_commands,
           st->untied ? "lm_head untied from the embeddings (written as a separate tensor)" : "embeddings as in the input");
    if (st->f32_commands == 0)
        printf("  arithmetic: double (rounded once to the output dtype)\n");
    else
        printf("  arithmetic: f32 for the %lld command%s on weights written as f16/bf16 (error ~log2(n) * 2^-24, below their "
               "rounding)%s\n", (long long)st->f32_commands, st->f32_commands == 1 ? "" : "s",
               st->f32_commands < st->n_commands ? ", double for the others" : "");
    if (n_e || n_sh)   /* mixture of experts: one hook per layer for all its routed experts */
        snprintf(moe, sizeof moe, ", expert_down_input %lld, shared_down_input %lld", (long long)n_e, (long long)n_sh);
    if (j->hooks)
        printf("  online hooks: %lld (down_input %lld, o_input %lld, q_rope %lld, k_rope %lld%s) -> %s\n",
               (long long)list->count, (long long)n_down, (long long)n_o, (long long)n_q, (long long)n_k,
               n_e || n_sh ? moe : "", j->hooks_path);
    else
        printf("  online hooks: none (the output runs unchanged in an ordinary engine)\n");
    printf("  wrote %lld tensors%s%s%s\n", (long long)st->tensors_written, dtype != QUAROT_DTYPE_DEFAULT ? " as " : "",
           dtype != QUAROT_DTYPE_DEFAULT ? quarot_dtype_name(dtype) : "", j->config_path ? " (+ config.json beside it)" : "");
    if (st->direct_mode) printf("  weights written: %s\n", qx_direct_mode_text((qx_direct_mode)st->direct_mode));
    printf("  memory: peak resident %.1f MiB; writable copies at most %.1f MiB (globals %.1f MiB); layers held at once: %lld\n",
           qx_lw_peak_rss_mib(), (double)st->peak_copy_bytes * mib, (double)st->global_copy_bytes * mib, (long long)st->max_live_layers);
    if (qx_rotate_file_globals_line(st, line, sizeof line)) printf("  %s\n", line);
    fflush(stdout);
    if (j->gguf_vl && j->job->mmproj)
        qx_cli_info(j->cli, "%s: the text decoder of a qwen2vl model, rotated with its mmproj %s: mm.2 (the merger's output "
                            "projection) by the same R1 on its output side, the rest of the vision tower copied -> %s",
                    j->job->in, j->job->mmproj, j->job->mmproj_out);
    if (j->hooks) qx_cli_info(j->cli, "online hook list written to %s: the engine must apply it (quarot rotate --help)", j->hooks_path);
    else if (qx_path_exists(j->hooks_path) && remove(j->hooks_path) == 0)
        qx_cli_info(j->cli, "removed %s (an earlier run's hook list; this model needs none)", j->hooks_path);
}

/* --check: the experts every MoE layer chose for each token, [layer][token][k] */
typedef struct rj_routes {
    int32_t* chosen;
    int64_t T, k, calls;
} rj_routes;

static void rj_on_route(void* u, int64_t layer, const int32_t* experts, int64_t T, int64_t k) {
    rj_routes* r = (rj_routes*)u;
    if (r->chosen && T == r->T && k == r->k) memcpy(r->chosen + layer * T * k, experts, (size_t)(T * k) * sizeof *experts);
    r->calls++;
}

/* The logits of QX_ROTATE_CHECK_TOKENS tokens through s (hooks may be NULL) into logits, the routes into rt. */
static quarot_result rj_check_run(const qx_store* s, const quarot_online_list* hooks, const int32_t* toks, int64_t T,
                                  float* logits, rj_routes* rt, qx_err* e) {
    qx_ek_forward ef;
    quarot_result r = qx_ek_forward_init(&ef, s, hooks, NULL, NULL, NULL, e);
    if (r != QUAROT_OK) return r;
    ef.f.opts.route = rj_on_route;   /* read at run time */
    ef.f.opts.route_user = rt;
    r = qx_forward_window(&ef.f, toks, T, logits, e);
    if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
    if (r != QUAROT_OK && e && !e->msg[0]) qx_err_set(e, "%s", quarot_result_string(r));
    qx_ek_forward_free(&ef);
    return r;
}

/* --check, vision-language: the merger's output y for RJ_PATCHES fixed random patch features, as
   y . E_v for every embedding row v (prod[n][v]) and |y| (norm[n]). The rotated model must give the
   same: y' = y R1 and E' = E R1, so y' E'^T = y E^T and |y'| = |y|, without forming R1. */
#define RJ_PATCHES 2
static quarot_result rj_merger_probe(const qx_store* s, double* prod, double* norm, qx_err* e) {
    const quarot_tensor* w = qx_store_find(s, QX_VL_MERGER_WEIGHT);
    const quarot_tensor* b = qx_store_find(s, QX_VL_MERGER_BIAS);
    const quarot_tensor* E = qx_store_find(s, "model.embed_tokens.weight");
    int64_t in, h, V, n, o, k, v;
    float *row, *z, *bias;
    double* y;
    quarot_rng rng;
    quarot_result r = QUAROT_OK;
    if (!w || !b || !E) { qx_err_set(e, "the merger or the embedding is missing"); return QUAROT_ERR_NOT_FOUND; }
    in = w->ne[0];
    h = w->ne[1];
    V = E->ne[1];
    row = (float*)malloc((size_t)(in > h ? in : h) * sizeof *row);
    z = (float*)malloc((size_t)(RJ_PATCHES * in) * sizeof *z);
    bias = (float*)malloc((size_t)h * sizeof *bias);
    y = (double*)calloc((size_t)(RJ_PATCHES * h), sizeof *y);
    if (!row || !z || !bias || !y) r = QUAROT_ERR_OUT_OF_MEMORY;
    quarot_rng_seed(&rng, 1);
    for (k = 0; r == QUAROT_OK && k < RJ_PATCHES * in; ++k) z[k] = (float)quarot_rng_normal(&rng);
    if (r == QUAROT_OK) r = quarot_tensor_get_row_f32(b, 0, bias);
    for (o = 0; r == QUAROT_OK && o < h; ++o) {
        if ((r = quarot_tensor_get_row_f32(w, o, row)) != QUAROT_OK) break;
        for (n = 0; n < RJ_PATCHES; ++n) {
            double acc = bias[o];
            for (k = 0; k < in; ++k) acc += (double)z[n * in + k] * row[k];
            y[n * h + o] = acc;
        }
    }
    for (n = 0; r == QUAROT_OK && n < RJ_PATCHES; ++n) {
        double q = 0;
        for (o = 0; o < h; ++o) q += y[n * h + o] * y[n * h + o];
        norm[n] = sqrt(q);
    }
    for (v = 0; r == QUAROT_OK && v < V; ++v) {
        if ((r = quarot_tensor_get_row_f32(E, v, row)) != QUAROT_OK) break;
        for (n = 0; n < RJ_PATCHES; ++n) {
            double acc = 0;
            for (o = 0; o < h; ++o) acc += y[n * h + o] * row[o];
            prod[n * V + v] = acc;
        }
    }
    if (r != QUAROT_OK) qx_err_set(e, "merger probe: %s", quarot_result_string(r));
    free(row);
    free(z);
    free(bias);
    free(y);
    return r;
}

/* --check: IN and OUT (read back, with the hook list written beside it) on the same tokens; the
   largest logit difference relative to the largest |logit|, and the MoE tokens whose chosen expert
   set changed. Reported, not judged (an f16/bf16 output differs by its rounding). */
static int rj_check(rj_run* j) {
    const quarot_model_config* c = &j->s.config;
    const int64_t V = c->vocab, L = c->n_layers, K = c->n_experts > 0 ? c->n_experts_used : 0;
    int64_t T = QX_ROTATE_CHECK_TOKENS, i, flips = 0, moe_layers = 0, l, t;
    int32_t toks[QX_ROTATE_CHECK_TOKENS];
    float *la = NULL, *lb = NULL;
    rj_routes ra, rb;
    qx_store out;
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    double d = 0.0, amax = 0.0;
    double *pa = NULL, *pb = NULL, na[RJ_PATCHES], nb[RJ_PATCHES];
    int rc = QX_EXIT_OK, vl = j->n_vision > 0 && !j->job->text_only;   /* --text-only: OUT has no merger */
    if (c->max_seq > 0 && T > c->max_seq) T = c->max_seq;
    for (i = 0; i < T; ++i) toks[i] = (int32_t)((i * 37 + 1) % V);
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    ra.T = rb.T = T;
    ra.k = rb.k = K;
    la = (float*)malloc((size_t)(T * V) * sizeof *la);
    lb = (float*)malloc((size_t)(T * V) * sizeof *lb);
    if (K) {
        ra.chosen = (int32_t*)malloc((size_t)(L * T * K) * sizeof *ra.chosen);
        rb.chosen = (int32_t*)malloc((size_t)(L * T * K) * sizeof *rb.chosen);
    }
    if (vl) {
        pa = (double*)malloc((size_t)(RJ_PATCHES * V) * sizeof *pa);
        pb = (double*)malloc((size_t)(RJ_PATCHES * V) * sizeof *pb);
    }
    if (!la || !lb || (K && (!ra.chosen || !rb.chosen)) || (vl && (!pa || !pb))) {
        rc = qx_cli_fail(j->cli, QX_EXIT_INTERNAL, "--check: out of memory");
        goto done;
    }
    if (K) {
        memset(ra.chosen, 0xff, (size_t)(L * T * K) * sizeof *ra.chosen);
        memset(rb.chosen, 0xff, (size_t)(L * T * K) * sizeof *rb.chosen);
    }
    memset(&lo, 0, sizeof lo);
    memset(&e, 0, sizeof e);
    qx_store_init(&out);
    r = qx_load_model(j->job->in, &lo, &out, &e);   /* afresh: the rotation consumed j->s's norms */
    if (r == QUAROT_OK) r = rj_check_run(&out, NULL, toks, T, la, &ra, &e);
    if (r == QUAROT_OK && vl) r = rj_merger_probe(&out, pa, na, &e);
    qx_store_free(&out);
    qx_store_init(&out);
    if (r != QUAROT_OK) {
        rc = qx_cli_fail(j->cli, qx_cli_exit_for(r), "--check: %s: %s", j->job->in, e.msg);
        goto done;
    }
    r = qx_load_model(j->job->out, &lo, &out, &e);
    if (r == QUAROT_OK) r = rj_check_run(&out, j->hooks ? &j->list : NULL, toks, T, lb, &rb, &e);
    if (r == QUAROT_OK && vl) r = rj_merger_probe(&out, pb, nb, &e);
    qx_store_free(&out);
    if (r != QUAROT_OK) {
        rc = qx_cli_fail(j->cli, qx_cli_exit_for(r), "--check: %s: %s", j->job->out, e.msg);
        goto done;
    }
    for (i = 0; i < T * V; ++i) {
        double x = fabs((double)la[i] - (double)lb[i]);
        if (x > d) d = x;
        if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
    }
    for (l = 0; K && l < L; ++l) {
        if (!quarot_config_layer_is_moe(c, l)) continue;
        ++moe_layers;
        for (t = 0; t < T; ++t) {   /* the set of experts, whatever their order */
            const int32_t* a = ra.chosen + (l * T + t) * K;
            const int32_t* b = rb.chosen + (l * T + t) * K;
            int64_t x, y, same = 0;
            for (x = 0; x < K; ++x)
                for (y = 0; y < K; ++y) same += a[x] == b[y] && a[x] >= 0;
            flips += same != K;
        }
    }
    printf("  check: %lld tokens through IN and OUT%s: logits max |difference| %.3g, %.2e of the largest |logit| %.3g",
           (long long)T, j->hooks ? " (with its hooks)" : "", d, amax > 0 ? d / amax : 0.0, amax);
    if (K) printf("; routing flips %lld of %lld tokens in %lld MoE layers", (long long)flips, (long long)(T * moe_layers),
                  (long long)moe_layers);
    printf("\n");
    if (vl) {   /* the merger of the vision tower: its output times R1 */
        double pd = 0.0, pm = 0.0, nd = 0.0;
        for (i = 0; i < RJ_PATCHES * V; ++i) {
            if (fabs(pb[i] - pa[i]) > pd) pd = fabs(pb[i] - pa[i]);
            if (fabs(pa[i]) > pm) pm = fabs(pa[i]);
        }
        for (i = 0; i < RJ_PATCHES; ++i)
            if (na[i] > 0 && fabs(nb[i] - na[i]) / na[i] > nd) nd = fabs(nb[i] - na[i]) / na[i];
        printf("  check: vision merger output y of %d random patch features: y'E'^T vs yE^T over every embedding row %.2e of "
               "the largest, |y'| vs |y| %.2e\n", RJ_PATCHES, pm > 0 ? pd / pm : 0.0, nd);
    }
    fflush(stdout);
done:
    free(pa);
    free(pb);
    free(la);
    free(lb);
    free(ra.chosen);
    free(rb.chosen);
    return rc;
}

/* Load IN; refuse a hooked input; pick OUT's format and convert the metadata and tokenizer; check
   the model, the rotated dimensions and every output path; rotate; print the summary. */
int qx_rotate_job_run(qx_cli* cli, const qx_rotate_job* job) {
    rj_run j;
    int rc;
    memset(&j, 0, sizeof j);
    j.cli = cli;
    j.job = job;
    j.adapt = job->rotation == QUAROT_ROTATION_ADAPT;
    j.learned = job->rotation == QUAROT_ROTATION_MATRIX;
    j.hooks = job->online || job->r3;
    j.ext_fmt = qx_convert_format_of_path(job->out);
    if ((rc = rj_check_job(&j)) != QX_EXIT_OK) return rc;
    quarot_online_list_init(&j.list, NULL);
    qx_store_init(&j.s);
    rc = rj_load_input(&j);
    if (rc == QX_EXIT_OK) rc = rj_pick_format(&j);
    if (rc == QX_EXIT_OK) rc = rj_convert(&j);
    if (rc == QX_EXIT_OK) rc = rj_check_model(&j);
    if (rc == QX_EXIT_OK) rc = rj_check_dims(&j);
    if (rc == QX_EXIT_OK) rc = rj_vision_note(&j);
    if (rc == QX_EXIT_OK) rc = rj_check_outputs(&j);
    if (rc == QX_EXIT_OK) rc = rj_rotate(&j);
    if (rc == QX_EXIT_OK) {
        rj_print_rotations(&j);
        rj_print_work(&j);
        if (job->check) rc = rj_check(&j);
    }
    rj_free(&j);
    return rc;
}

/* The operands and the options that go together, checked before anything is read. */
static int rotate_check_options(qx_cli* cli, rotate_opts* o) {
    if (!o->in || !o->out) return qx_cli_fail(cli, QX_EXIT_USAGE, "needs IN and OUT (usage: quarot rotate IN OUT [options])");
    if (!o->mmproj != !o->mmproj_out) return qx_cli_fail(cli, QX_EXIT_USAGE, "--mmproj and --mmproj-out go together");
    if (o->mmproj && (qx_same_file(o->mmproj, o->mmproj_out) || strcmp(o->mmproj_out, o->out) == 0))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--mmproj-out: %s is the mmproj or OUT itself (choose another file)", o->mmproj_out);
    if (o->rot.context && !o->rot.rotation_given) o->rot.rotation = QX_ROT_ADAPT;   /* --context alone means Adapt Rotation stage 2 */
    if (o->rot.context && o->rot.rotation != QX_ROT_ADAPT)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--context goes with --rotation adapt (it holds Adapt Rotation's learned R), not --rotation %s",
                           qx_opt_word(qx_opts_rotations, o->rot.rotation));
    if (o->rot.rotation == QX_ROT_ADAPT && !o->rot.context)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--rotation adapt needs --context FILE, the Adapt Rotation context of stage 1: run `quarot calibrate` "
                                                "(stage 1) first");
    if (o->rot.rotations && !o->rot.rotation_given) o->rot.rotation = QX_ROT_LEARNED;   /* --rotations alone means them */
    if (o->rot.rotations && o->rot.rotation != QX_ROT_LEARNED)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--rotations goes with --rotation learned, not --rotation %s",
                           qx_opt_word(qx_opts_rotations, o->rot.rotation));
    if (o->rot.rotation == QX_ROT_LEARNED && !o->rot.rotations)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--rotation learned needs --rotations FILE: run `quarot calibrate --method spinquant` first");
    if (o->rot.rotation == QX_ROT_LEARNED && (o->rot.block_given || o->rot.seed_given))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--%s: the learned rotations are dense matrices, nothing is seeded or blocked",
                           o->rot.seed_given ? "seed" : "block-size");
    if (o->layers && !o->online) return qx_cli_fail(cli, QX_EXIT_USAGE, "--down-proj-online-layers needs --online");
    return QX_EXIT_OK;
}

/* The job's rotation. Learned (--rotations): the file is read (and checked as a file) before the
   model, against the model in the job. Stage 2 (--context): the context is read (and fully
   validated) before the model, and its seed and block are the ones used; --rotation none: a
   conversion, norms fused, no R1 / R2. */
static int rotate_pick_rotation(qx_cli* cli, rotate_opts* o, quarot_adapt_context* ctx, qx_spin_rot* learned, qx_rotate_job* job) {
    quarot_result r;
    qx_err e;
    if (o->rot.rotations) {
        r = qx_spin_load(o->rot.rotations, learned, &e);
        if (r != QUAROT_OK) return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
        job->rotation = QUAROT_ROTATION_MATRIX;
        job->learned = learned;
        job->learned_name = o->rot.rotations;
        o->rot.block_size = -1;
    } else if (o->rot.context) {
        r = qx_calib_context_load(o->rot.context, ctx, &e);
        if (r != QUAROT_OK) return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
        if (o->rot.seed_given && (uint64_t)o->rot.seed != ctx->seed)
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--seed %lld conflicts with the context's seed %llu (stage 2 rebuilds H from stage 1's seed; "
                                                   "leave --seed out)", (long long)o->rot.seed, (unsigned long long)ctx->seed);
        if (o->rot.block_given && o->rot.block_size > 0 && o->rot.block_size != ctx->block)   /* -1: the context's block */
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--block-size %lld differs from the context's block %lld (set at stage 1 by quarot calibrate "
                                                   "--block-size; leave --block-size out)", (long long)o->rot.block_size, (long long)ctx->block);
        job->rotation = QUAROT_ROTATION_ADAPT;
        job->context = ctx;
        job->context_name = o->rot.context;
        o->rot.block_size = ctx->block;
    } else if (o->rot.rotation == QX_ROT_NONE) {
        job->rotation = QUAROT_ROTATION_IDENTITY;
        o->rot.no_r2 = 1;
    } else {
        job->rotation = o->rot.rotation == QX_ROT_RANDOM ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD;
    }
    return QX_EXIT_OK;
}

/* The rest of the job from the options (after rotate_pick_rotation, which settles the block size
   and R2). */
static void rotate_fill_job(const rotate_opts* o, const int64_t* layer_list, int64_t n_layer_list, qx_rotate_job* job) {
    job->in = o->in;
    job->out = o->out;
    job->seed = (uint64_t)o->rot.seed;
    job->block_size = o->rot.block_size;
    job->no_r2 = o->rot.no_r2;
    job->online = o->online;
    job->r3 = o->r3;
    job->max_tp_size = o->rot.max_tp_size;
    if (layer_list) {
        job->down_proj_online = QUAROT_LAYERS_LIST;
        job->layers = layer_list;
        job->n_layers = n_layer_list;
        job->layers_what = "--down-proj-online-layers";
    }
    job->dtype = (quarot_dtype)o->dtype;
    job->force = o->c.force;
    job->format = qx_opt_word(rotate_formats, o->format);
    job->strict = o->rot.strict;
    job->threads = (int)o->c.threads;
    job->f64 = o->f64;
    job->check = o->check;
    job->mmproj = o->mmproj;
    job->mmproj_out = o->mmproj_out;
    job->text_only = o->text_only;
}

int qx_cmd_rotate(int argc, char** argv) {
    qx_cli cli;
    rotate_opts o;
    int rc;
    int64_t* layer_list = NULL;
    int64_t n_layer_list = 0;
    quarot_adapt_context ctx;
    qx_spin_rot learned;
    qx_rotate_job job;

    /* A file-size limit makes writes fail with EFBIG instead of killing the process, so the
       temporaries are removed and the error is reported like any other write error. */
    signal(SIGXFSZ, SIG_IGN);
    qx_cli_init(&cli, "rotate", 0);
    memset(&o, 0, sizeof o);
    o.dtype = QUAROT_DTYPE_DEFAULT;
    qx_opts_rotation_init(&o.rot);
    if ((rc = qx_opts_parse(&qx_cmd_rotate_spec, &cli, argc, argv, &o)) != QX_OPTS_RUN) return rc;
    cli.quiet = o.c.quiet;
    if ((rc = rotate_check_options(&cli, &o)) != QX_EXIT_OK) return rc;
    if (o.layers && !parse_layers(&cli, o.layers, &layer_list, &n_layer_list)) return QX_EXIT_USAGE;
    memset(&job, 0, sizeof job);
    memset(&learned, 0, sizeof learned);
    quarot_adapt_context_init(&ctx, NULL);
    rc = rotate_pick_rotation(&cli, &o, &ctx, &learned, &job);
    if (rc == QX_EXIT_OK) {
        rotate_fill_job(&o, layer_list, n_layer_list, &job);
        rc = qx_rotate_job_run(&cli, &job);
    }
    quarot_adapt_context_free(&ctx);
    qx_spin_rot_free(&learned);
    free(layer_list);
    return rc;
}
