/* qx_opts.c - see qx_opts.h. */
#include "cli/qx_opts.h"
#include "model/qx_windows.h"

#include <string.h>

#define QX__OPTS_WIDTH 100     /* help lines are at most this wide (a longer word stands alone) */
#define QX__OPTS_COL_MAX 26    /* where help texts start at most (longer names push it on that line) */

const char* qx_opt_word(const qx_opt_choice* choices, int value) {
    for (; choices && choices->word; ++choices)
        if (choices->value == value) return choices->word;
    return NULL;
}

int qx_opts_takes(const qx_opt_use* u, const qx_opt* o) {
    return u->pick == 0 || o->id == 0 || (u->pick & o->id) != 0;
}

static int qx__opt_valued(const qx_opt* o) {
    return o->kind != QX_OPT_FLAG && o->kind != QX_OPT_FLAG_OFF;
}

/* a is `name` (flags) or `name`, `name=...` (valued): the length of name, else 0 */
static size_t qx__opt_match(const qx_opt* o, const char* name, const char* a) {
    size_t n;
    if (!name) return 0;
    n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '\0' || (a[n] == '=' && qx__opt_valued(o))) return n;
    return 0;
}

static void qx__opt_store_int(void* p, size_t size, int64_t v) {
    if (size == sizeof(int)) *(int*)p = (int)v;
    else *(int64_t*)p = v;
}

static int qx__opt_choice(qx_cli* cli, const qx_opt* o, const char* name, const char* v, int* out) {
    const qx_opt_choice* c;
    char list[256];
    size_t n = 0, k = 0, count = 0;
    for (c = o->choices; c->word; ++c, ++count)
        if (strcmp(c->word, v) == 0) { *out = c->value; return 1; }
    if (o->bad) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' %s", name, v, o->bad), 0;
    list[0] = '\0';
    for (c = o->choices; c->word; ++c, ++k) {
        const char* sep = k == 0 ? "" : k + 1 == count ? " or " : ", ";
        int w = snprintf(list + n, sizeof list - n, "%s%s", sep, c->word);
        if (w < 0 || (size_t)w >= sizeof list - n) break;
        n += (size_t)w;
    }
    return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' is not %s", name, v, list), 0;
}

/* The value of one option into its field; 1, or 0 after the error line. */
static int qx__opt_value(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    char* field = (char*)base + o->off;
    switch (o->kind) {
        case QX_OPT_INT: {
            int64_t x;
            if (!qx_cli_int(cli, name, v, o->lo, o->hi, &x)) return 0;
            qx__opt_store_int(field, o->size, x);
            break;
        }
        case QX_OPT_FLOAT: {
            double x;
            if (!qx_cli_float(cli, name, v, o->flo, o->fhi, &x)) return 0;
            if (((o->open & QX_OPT_OPEN_LO) && !(x > o->flo)) || ((o->open & QX_OPT_OPEN_HI) && !(x < o->fhi)))
                return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' is not a number in %c%g, %g%c", name, v, (o->open & QX_OPT_OPEN_LO) ? '(' : '[',
                                   o->flo, o->fhi, (o->open & QX_OPT_OPEN_HI) ? ')' : ']'), 0;
            if (o->size == sizeof(float)) *(float*)field = (float)x;
            else *(double*)field = x;
            break;
        }
        case QX_OPT_STRING: *(const char**)field = v; break;
        case QX_OPT_CHOICE: {
            int x;
            if (!qx__opt_choice(cli, o, name, v, &x)) return 0;
            *(int*)field = x;
            break;
        }
        case QX_OPT_CUSTOM: return o->fn(cli, o, name, v, base);
        default: return 0;
    }
    return o->fn ? o->fn(cli, o, name, v, base) : 1;
}

/* "IN OUT [options]" */
static void qx__opts_synopsis(const qx_opts_cmd* cmd, char* buf, size_t cap) {
    const qx_opt_operand* op;
    size_t n = 0;
    if (cmd->synopsis) { snprintf(buf, cap, "%s", cmd->synopsis); return; }
    buf[0] = '\0';
    for (op = cmd->operands; op < cmd->operands + 3 && op->name && n < cap; ++op) {
        int w = snprintf(buf + n, cap - n, "%s ", op->name);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (n < cap) snprintf(buf + n, cap - n, "[options]");
}

int qx_opts_parse(const qx_opts_cmd* cmd, qx_cli* cli, int argc, char** argv, void* opts) {
    int i, n_operands = 0, max_operands = 0;
    while (max_operands < 3 && cmd->operands[max_operands].name) ++max_operands;
    argc = qx_cli_end_of_options_at(argc, argv, 1);
    for (i = 1; i < argc; ++i) {
        const char* a = argv[i];
        const qx_opt *o = NULL, *p;
        const qx_opt_use* u;
        void* base = NULL;
        size_t n = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { qx_opts_help(cmd, stdout); return QX_EXIT_OK; }
        if (a[0] != '-' || a[1] == '\0') {
            if (n_operands < max_operands) {
                *(const char**)((char*)opts + cmd->operands[n_operands++].off) = a;
                continue;
            }
            if (max_operands == 0) return qx_cli_fail(cli, QX_EXIT_USAGE, "unknown argument '%s' (see quarot %s --help)", a, cmd->name);
            if (cmd->usage_on_excess) {
                char syn[256];
                qx__opts_synopsis(cmd, syn, sizeof syn);
                return qx_cli_fail(cli, QX_EXIT_USAGE, "unexpected argument '%s' (usage: quarot %s %s)", a, cmd->name, syn);
            }
            return qx_cli_fail(cli, QX_EXIT_USAGE, "unexpected argument '%s' (one %s; see quarot %s --help)", a, cmd->operands[0].name, cmd->name);
        }
        for (u = cmd->uses; u < cmd->uses + QX_OPTS_MAX_USES && u->group && !o; ++u)
            for (p = u->group->opts; p->kind != QX_OPT_END; ++p)
                if (qx_opts_takes(u, p) && ((n = qx__opt_match(p, p->name, a)) != 0 || (n = qx__opt_match(p, p->alias, a)) != 0)) {
                    o = p;
                    base = (char*)opts + u->off;
                    break;
                }
        if (!o) return qx_cli_fail(cli, QX_EXIT_USAGE, "unknown %s '%s' (see quarot %s --help)", max_operands ? "option" : "argument", a, cmd->name);
        if (o->kind == QX_OPT_FLAG || o->kind == QX_OPT_FLAG_OFF) {
            *(int*)((char*)base + o->off) = o->kind == QX_OPT_FLAG;
        } else {
            char name[64];
            const char* v;
            snprintf(name, sizeof name, "%.*s", (int)n, a);
            if (a[n] == '=') v = a + n + 1;
            else if (i + 1 < argc) v = argv[++i];
            else return qx_cli_fail(cli, QX_EXIT_USAGE, "option %s needs a value (see quarot %s --help)", name, cmd->name);
            if (!qx__opt_value(cli, o, name, v, base)) return QX_EXIT_USAGE;
        }
        if (o->given) *(int*)((char*)base + o->given - 1) = 1;
    }
    return QX_OPTS_RUN;
}

/* ---- help ---- */

/* "  -o, --output FILE" (a short alias first, a long one after the name) */
static int qx__opt_names(const qx_opt* o, char* buf, size_t cap) {
    char arg[160];
    int n;
    arg[0] = '\0';
    if (o->arg) {
        snprintf(arg, sizeof arg, " %s", o->arg);
    } else if (o->kind == QX_OPT_CHOICE) {
        const qx_opt_choice* c;
        size_t k = 0;
        for (c = o->choices; c->word && k + 1 < sizeof arg; ++c) {
            int w = snprintf(arg + k, sizeof arg - k, "%c%s", c == o->choices ? ' ' : '|', c->word);
            if (w < 0) break;
            k += (size_t)w;
        }
    } else if (qx__opt_valued(o)) {
        snprintf(arg, sizeof arg, " VALUE");
    }
    if (!o->alias) n = snprintf(buf, cap, "  %s%s", o->name, arg);
    else if (o->alias[1] != '-') n = snprintf(buf, cap, "  %s, %s%s", o->alias, o->name, arg);
    else n = snprintf(buf, cap, "  %s, %s%s", o->name, o->alias, arg);
    return n < 0 ? 0 : n >= (int)cap ? (int)cap - 1 : n;
}

/* text from column pos (the cursor), wrapped before QX__OPTS_WIDTH with further lines at col; each
   '\n' starts a paragraph on a new line, indented by its leading spaces; in an indented paragraph a
   first word followed by two spaces or more is a term whose description the further lines align
   with ("  stream  the whole text ..."). */
static void qx__opts_wrap(FILE* f, const char* text, int col, int pos) {
    const char* s = text;
    int hang = col, fresh = 1, term = 0;
    while (*s) {
        const char *w, *sp;
        int len, gap;
        if (*s == '\n') {
            int indent = 0;
            for (++s; *s == ' '; ++s) ++indent;
            fprintf(f, "\n%*s", col + indent, "");
            pos = hang = col + indent;
            fresh = 1;
            term = indent > 0;
            continue;
        }
        for (sp = s; *s == ' '; ++s) {}
        gap = (int)(s - sp);
        if (!*s || *s == '\n') continue;
        for (w = s; *s && *s != ' ' && *s != '\n'; ++s) {}
        len = (int)(s - w);
        if (!fresh && pos + gap + len > QX__OPTS_WIDTH) {
            fprintf(f, "\n%*s", hang, "");
            pos = hang;
            fresh = 1;
        }
        if (!fresh) { fprintf(f, "%*s", gap, ""); pos += gap; }
        fwrite(w, 1, (size_t)len, f);
        pos += len;
        fresh = 0;
        if (term) {
            for (sp = s; *sp == ' '; ++sp) {}
            if (sp - s >= 2) hang = pos + (int)(sp - s);
            term = 0;
        }
    }
    fputc('\n', f);
}

/* help + " (default: DEF)" + " [REF]", the two after the first paragraph */
static void qx__opt_text(const qx_opt* o, char* buf, size_t cap) {
    const char* help = o->help ? o->help : "";
    size_t head = strcspn(help, "\n");
    snprintf(buf, cap, "%.*s%s%s%s%s%s%s", (int)head, help, o->def ? " (default: " : "", o->def ? o->def : "", o->def ? ")" : "",
             o->ref ? " [" : "", o->ref ? o->ref : "", o->ref ? "]" : "");
    if (help[head]) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s", help + head);
    }
}

static void qx__opts_help_line(FILE* f, int col) {
    fprintf(f, "  -h, --help%*sthis text\n", col > 12 ? col - 12 : 2, "");
}

void qx_opts_help(const qx_opts_cmd* cmd, FILE* f) {
    const qx_opt_use *u, *end = cmd->uses + QX_OPTS_MAX_USES;
    const qx_opt* o;
    char names[256], text[4096];
    int col = 0, help_done = 0;
    qx__opts_synopsis(cmd, text, sizeof text);
    fprintf(f, "usage: quarot %s %s\n", cmd->name, text);
    if (cmd->about) fprintf(f, "\n%s", cmd->about);
    for (u = cmd->uses; u < end && u->group; ++u)
        for (o = u->group->opts; o->kind != QX_OPT_END; ++o) {
            int n = qx_opts_takes(u, o) ? qx__opt_names(o, names, sizeof names) + 2 : 0;
            if (n <= QX__OPTS_COL_MAX && n > col) col = n;
        }
    for (u = cmd->uses; u < end && u->group; ++u) {
        const char* title = u->title ? u->title : u->group->title;
        if (title && u != cmd->uses && !help_done) { qx__opts_help_line(f, col); help_done = 1; }   /* ends the first section */
        if (title) fprintf(f, "\n%s\n", title);
        for (o = u->group->opts; o->kind != QX_OPT_END; ++o) {
            int n;
            if (!qx_opts_takes(u, o)) continue;
            n = qx__opt_names(o, names, sizeof names);
            fputs(names, f);
            if (n + 2 <= col) { fprintf(f, "%*s", col - n, ""); n = col; }
            else { fputs("  ", f); n += 2; }
            qx__opt_text(o, text, sizeof text);
            qx__opts_wrap(f, text, col, n);
        }
        if (u->group->note) {
            fputs("  ", f);
            qx__opts_wrap(f, u->group->note, 2, 2);
        }
    }
    if (!help_done) qx__opts_help_line(f, col);
    if (cmd->epilog) {
        fputc('\n', f);
        if (cmd->epilog_arg) fprintf(f, cmd->epilog, cmd->epilog_arg());
        else fputs(cmd->epilog, f);
    }
}

/* ---- shared groups ---- */

static const qx_opt qx__common_opts[] = {
    {QX_OPT_INT, "--threads", .arg = "N", QX_AT(qx_opts_common, threads), .lo = 1, .hi = 256, .id = QX_COMMON_THREADS,
     .def = "every online core", .help = "threads for the work that runs in parallel; the results are the same for any N"},
    {QX_OPT_FLAG, "--quiet", QX_AT(qx_opts_common, quiet), .id = QX_COMMON_QUIET,
     .help = "no progress and no information lines on stderr (errors and warnings are still printed)"},
    {QX_OPT_FLAG, "--quiet", "-q", QX_AT(qx_opts_common, quiet), .id = QX_COMMON_QUIET_Q,
     .help = "no progress and no information lines on stderr (errors and warnings are still printed)"},
    {QX_OPT_FLAG, "--force", QX_AT(qx_opts_common, force), .id = QX_COMMON_FORCE, .help = "replace existing outputs"},
    {QX_OPT_FLAG, "--force", "-f", QX_AT(qx_opts_common, force), .id = QX_COMMON_FORCE_F, .help = "replace existing outputs"},
    {QX_OPT_END}
};
const qx_opt_group qx_opts_common_group = {NULL, qx__common_opts, NULL};

static const qx_opt qx__input_opts[] = {
    {QX_OPT_STRING, "--tokenizer", .arg = "FILE", QX_AT(qx_opts_input, tokenizer), .id = QX_INPUT_TOKENIZER,
     .def = "the model's own: GGUF metadata, tokenizer.json beside it, tok<vocab>.bin / tok512.bin / tokenizer.bin beside a "
            "llama2.c model",
     .help = "a GGUF file, a tokenizer.json (or a directory holding one) or a llama2.c tokenizer.bin"},
    {QX_OPT_STRING, "--tokens", .arg = "FILE", QX_AT(qx_opts_input, tokens), .id = QX_INPUT_TOKENS,
     .help = "token ids in place of the text (--text, or a run configuration's dataset): whitespace separated or a JSON array "
             "(e.g. quarot tokenize MODEL --text T --no-bos --ids-only); stream windowing, every window starting with the "
             "tokenizer's BOS when one is found"},
    {QX_OPT_STRING, "--hooks", .arg = "FILE", QX_AT(qx_opts_input, hooks), .id = QX_INPUT_HOOKS,
     .def = "the one `quarot rotate --online` wrote beside it, MODEL.quarot-online or MODEL/quarot_online.txt",
     .help = "the model's online hook file; its weights digest must match the model"},
    {QX_OPT_END}
};
const qx_opt_group qx_opts_input_group = {NULL, qx__input_opts, NULL};

const qx_opt_choice qx_opts_rotations[] = {
    {"hadamard", QX_ROT_HADAMARD}, {"random", QX_ROT_RANDOM}, {"adapt", QX_ROT_ADAPT}, {"none", QX_ROT_NONE},
    {"learned", QX_ROT_LEARNED}, {NULL, 0}};

static int qx__block_nonzero(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    (void)v;
    if (*(int64_t*)((char*)base + o->off) == 0)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: 0 is not a block size (-1 = full hidden)", name), 0;
    return 1;
}

static int qx__power_of_two(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    int64_t x = *(int64_t*)((char*)base + o->off);
    (void)v;
    if (x & (x - 1)) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld is not a power of two", name, (long long)x), 0;
    return 1;
}

static const qx_opt qx__rotation_opts[] = {
    {QX_OPT_CHOICE, "--rotation", .arg = "KIND", QX_AT(qx_opts_rotation, rotation), QX_GIVEN(qx_opts_rotation, rotation_given),
     .choices = qx_opts_rotations, .id = QX_ROTATION_KIND, .def = "hadamard",
     .help = "R1 (and R2): hadamard (random signs), random (seeded Haar-random orthogonal), adapt (Adapt Rotation stage 2: "
             "R1 = H*R with R learned by `quarot calibrate`, stage 1; needs --context; R2 stays Hadamard), none (no R1 / R2: "
             "only the norms are fused, e.g. to convert IN to OUT's format, or to quantize the model as it is), learned (R1 and "
             "one R2 per layer from --rotations FILE: SpinQuant's, by `quarot calibrate --method spinquant` or imported)"},
    {QX_OPT_STRING, "--context", .arg = "FILE", QX_AT(qx_opts_rotation, context), .id = QX_ROTATION_CONTEXT,
     .help = "an Adapt Rotation stage-1 context written by quarot calibrate: the seed and block of its random Hadamard H and the "
             "learned R (stage 2: R1 = H*R)"},
    {QX_OPT_STRING, "--rotations", .arg = "FILE", QX_AT(qx_opts_rotation, rotations), .id = QX_ROTATION_ROTATIONS,
     .help = "learned rotations (safetensors: R1 [hidden][hidden], model.layers.{i}.self_attn.R2 [head_dim][head_dim]) from quarot "
             "calibrate --method spinquant, or SpinQuant's R.bin converted (docs/tool.md); checked against the model (digest, "
             "shapes) and orthogonal to 1e-4, then made orthogonal in double"},
    {QX_OPT_INT, "--seed", .arg = "N", QX_AT(qx_opts_rotation, seed), QX_GIVEN(qx_opts_rotation, seed_given), .lo = 0,
     .hi = INT64_MAX, .id = QX_ROTATION_SEED, .def = "0", .ref = "--seed",
     .help = "seed of the random Hadamard signs and random matrices: R1, R2, stage 1's H"},
    {QX_OPT_INT, "--block-size", .arg = "N", QX_AT(qx_opts_rotation, block_size), QX_GIVEN(qx_opts_rotation, block_given),
     .lo = -1, .hi = INT64_MAX, .fn = qx__block_nonzero, .id = QX_ROTATION_BLOCK, .def = "-1",
     .help = "R1 as block-diagonal Hadamard blocks of N (must divide hidden); -1 = full hidden"},
    {QX_OPT_FLAG, "--no-r2", QX_AT(qx_opts_rotation, no_r2), .id = QX_ROTATION_NO_R2, .help = "do not fold R2 into v_proj/o_proj"},
    {QX_OPT_INT, "--max-tp-size", .arg = "N", QX_AT(qx_opts_rotation, max_tp_size), .lo = 1, .hi = (int64_t)1 << 30,
     .fn = qx__power_of_two, .id = QX_ROTATION_TP, .def = "1",
     .help = "online rotations stay inside 1/N of a dimension (tensor parallelism; a power of two)"},
    {QX_OPT_FLAG, "--no-online", QX_AT(qx_opts_rotation, no_online), .id = QX_ROTATION_NO_ONLINE,
     .help = "no online rotations, R1 + R2 folded only (default: QuaRot's online Hadamards before every down_proj and across "
             "the heads before every o_proj, and q/k after RoPE when the KV cache is quantized)"},
    {QX_OPT_FLAG, "--strict", QX_AT(qx_opts_rotation, strict), .id = QX_ROTATION_STRICT,
     .help = "a rotation fallback is an error instead of a warning: a block-diagonal R1, R2 or online rotation with blocks "
             "smaller than 64 (or than --block-size), or a dense random R1 where no Hadamard block exists (e.g. hidden 90 "
             "would get 45 blocks of 2x2)"},
    {QX_OPT_END}
};
const qx_opt_group qx_opts_rotation_group = {NULL, qx__rotation_opts, NULL};

void qx_opts_rotation_init(qx_opts_rotation* r) {
    memset(r, 0, sizeof *r);
    r->rotation = QX_ROT_HADAMARD;
    r->block_size = -1;
    r->max_tp_size = 1;
}

static const qx_opt qx__quant_opts[] = {
    {QX_OPT_FLAG, "--w-asym", QX_AT(qx_opts_quant, w_asym), .id = QX_QUANT_W_ASYM, .ref = "--w_asym",
     .help = "asymmetric weights (zero points)"},
    {QX_OPT_FLAG, "--w-asym", "--asym", QX_AT(qx_opts_quant, w_asym), .id = QX_QUANT_ASYM, .ref = "--w_asym",
     .help = "asymmetric weights (zero points)"},
    {QX_OPT_FLAG, "--w-clip", QX_AT(qx_opts_quant, w_clip), .id = QX_QUANT_W_CLIP, .ref = "--w_clip",
     .help = "weight clip search: per output channel (or group) the ratio 1.00..0.21 minimizing sum |Q(w)-w|^2.4; also "
             "inside GPTQ"},
    {QX_OPT_FLAG, "--a-asym", QX_AT(qx_opts_quant, a_asym), .id = QX_QUANT_A_ASYM, .ref = "--a_asym",
     .help = "asymmetric per-token activations"},
    {QX_OPT_FLAG, "--k-asym", QX_AT(qx_opts_quant, k_asym), .id = QX_QUANT_KV_ASYM, .ref = "--k_asym",
     .help = "asymmetric K cache (the default here)"},
    {QX_OPT_FLAG, "--v-asym", QX_AT(qx_opts_quant, v_asym), .id = QX_QUANT_KV_ASYM, .ref = "--v_asym",
     .help = "asymmetric V cache (the default here)"},
    {QX_OPT_FLAG_OFF, "--k-sym", QX_AT(qx_opts_quant, k_asym), .id = QX_QUANT_KV_ASYM,
     .help = "symmetric K cache (QuaRot's default without --k_asym)"},
    {QX_OPT_FLAG_OFF, "--v-sym", QX_AT(qx_opts_quant, v_asym), .id = QX_QUANT_KV_ASYM,
     .help = "symmetric V cache (QuaRot's default without --v_asym)"},
    {QX_OPT_FLOAT, "--k-clip", .arg = "R", QX_AT(qx_opts_quant, k_clip), .flo = 1e-6, .fhi = 1.0, .id = QX_QUANT_KV_CLIP,
     .def = "1.0", .ref = "--k_clip_ratio", .help = "K cache clip ratio"},
    {QX_OPT_FLOAT, "--v-clip", .arg = "R", QX_AT(qx_opts_quant, v_clip), .flo = 1e-6, .fhi = 1.0, .id = QX_QUANT_KV_CLIP,
     .def = "1.0", .ref = "--v_clip_ratio", .help = "V cache clip ratio"},
    {QX_OPT_END}
};
const qx_opt_group qx_opts_quant_group = {NULL, qx__quant_opts, NULL};

static const qx_opt_choice qx__wquants[] = {{"rtn", QX_WQ_RTN}, {"gptq", QX_WQ_GPTQ}, {NULL, 0}};

static const qx_opt qx__gptq_opts[] = {
    {QX_OPT_CHOICE, "--w-quant", QX_AT(qx_opts_gptq, w_quant), .choices = qx__wquants, .def = "rtn", .ref = "--w_rtn",
     .help = "weight quantizer: rtn rounds to nearest; gptq runs GPTQ per linear on Hessians of --calib-text, through the "
             "rotated model with its online hooks applied, layer by layer, each layer calibrated on the quantized layers before "
             "it (QuaRot's sequential mode; quarot eval and quarot quantize compute the same weights)"},
    {QX_OPT_STRING, "--calib-text", .arg = "FILE", QX_AT(qx_opts_gptq, calib_text), .ref = "--cal_dataset",
     .help = "calibration text (raw .txt, or .jsonl with one record per line), read with the model's tokenizer (or "
             "--tokenizer): GPTQ's Hessians"},
    {QX_OPT_FLAG, "--act-order", QX_AT(qx_opts_gptq, act_order), .ref = "--act_order",
     .help = "GPTQ columns by descending Hessian diagonal; with groups, static groups (scales from the original weights, "
             "codes in the natural layout)"},
    {QX_OPT_END}
};
const qx_opt_group qx_opts_gptq_group = {NULL, qx__gptq_opts, NULL};

static const qx_opt_choice qx__windowings[] = {{"stream", QX_WINDOWING_STREAM}, {"docs", QX_WINDOWING_DOCS}, {NULL, 0}};

static const qx_opt qx__windowing_opts[] = {
    {QX_OPT_INT, "--seq-len", .arg = "N", QX_AT(qx_opts_windowing, seq_len), .lo = 2, .hi = 1 << 20, .def = "256",
     .help = "window length in tokens, BOS included"},
    {QX_OPT_INT, "--windows", .arg = "N", QX_AT(qx_opts_windowing, windows), .lo = 0, .hi = INT64_C(1) << 40, .def = "0 = all",
     .help = "use only the first N windows"},
    {QX_OPT_CHOICE, "--windowing", QX_AT(qx_opts_windowing, windowing), .choices = qx__windowings,
     .bad = "is neither stream nor docs", .def = "stream",
     .help = "how a text becomes windows"
             "\n  stream  the whole text is encoded once (run.c's encoder, no BOS) and cut into consecutive chunks of seq_len-1 "
             "tokens (a trailing partial chunk is dropped); each window is [BOS] + chunk, run from position 0, and every one "
             "of its seq_len-1 chunk tokens is scored (the first one predicted from BOS alone)."
             "\n  docs    the text is split into documents at blank lines (lines empty or holding only spaces, tabs, CR); each "
             "document is encoded on its own and cut into chunks of seq_len-1 tokens, the last partial one included; each "
             "chunk becomes a window [BOS] + chunk from position 0 (a long document continues in further windows with a fresh "
             "BOS); windows follow file order."},
    {QX_OPT_END}
};
const qx_opt_group qx_opts_windowing_group = {NULL, qx__windowing_opts, NULL};

void qx_opts_windowing_init(qx_opts_windowing* w) {
    memset(w, 0, sizeof *w);
    w->seq_len = 256;
    w->windowing = QX_WINDOWING_STREAM;
}
