/* The exit-code table (docs/tool.md, "Exit codes") held by every command: for each command one case
   of each class it can meet -- 1 usage, 2 input, 3 output, 4 cannot do as asked -- run through the
   built binary on a synthetic model, each ending in one error line and the class's code, with no
   output left behind. (5, internal / out of memory, has no input that provokes it.)

   Truths used: the table's definitions. An unknown option is usage; a missing input file is input;
   an output that exists without --force is output; a --seq-len beyond the model's context, a prompt
   longer than the context, values a requested f16 output cannot hold, a layer the model does not
   have, or a layer_type that matches no linear are cannot-do. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "support/qx_file.h"

#include <sys/stat.h>
#include <unistd.h>

typedef struct ec_case {
    const char* cmd;   /* %M model, %T text, %O an absent output, %E an existing file, %V a model f16 cannot hold,
                          %N a missing file, %Y a run config, %A one whose Adapt stage 1 matches no linear */
    int code;
} ec_case;

static char p_model[1024], p_text[1024], p_out[1024], p_exists[1024], p_over[1024], p_yaml[1024], p_adapt[1024], p_shared[1024];

static void expand(const char* form, char* out, size_t cap) {
    size_t n = 0;
    const char* p;
    for (p = form; *p && n + 1100 < cap; ++p) {
        const char* v = NULL;
        if (p[0] == '%') {
            switch (p[1]) {
                case 'M': v = p_model; break;
                case 'T': v = p_text; break;
                case 'O': v = p_out; break;
                case 'E': v = p_exists; break;
                case 'V': v = p_over; break;
                case 'N': v = tmp_path("no_such_dir/no_such_file.bin"); break;
                case 'Y': v = p_yaml; break;
                case 'A': v = p_adapt; break;
                default: break;
            }
        }
        if (v) {
            n += (size_t)snprintf(out + n, cap - n, "'%s'", v);
            ++p;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

static int setup(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    quarot_tensor* t;
    qx_l2c_write_opts lo;
    qx_st_save_opts so;
    int ok;
    FILE* f;
    int i;
    snprintf(p_model, sizeof p_model, "%s", tmp_path("ec_model.bin"));
    snprintf(p_text, sizeof p_text, "%s", tmp_path("ec_text.txt"));
    snprintf(p_out, sizeof p_out, "%s", tmp_path("ec_out.gguf"));
    snprintf(p_exists, sizeof p_exists, "%s", tmp_path("ec_exists.gguf"));
    snprintf(p_over, sizeof p_over, "%s", tmp_path("ec_over"));
    snprintf(p_yaml, sizeof p_yaml, "%s", tmp_path("ec_run.yaml"));
    snprintf(p_shared, sizeof p_shared, "%s", tmp_path("ec_shared"));
    snprintf(p_adapt, sizeof p_adapt, "%s", tmp_path("ec_adapt.yaml"));
    cu_synth_desc(&d);
    qx_store_init(&s);
    ok = qx_synth_model(&s, &d, &e) == QUAROT_OK;
    memset(&lo, 0, sizeof lo);
    ok = ok && qx_l2c_write_file(&s, p_model, &lo, &e) == QUAROT_OK;
    t = ok ? qx_store_find(&s, "model.layers.1.mlp.up_proj.weight") : NULL;   /* 1e6 is beyond f16 */
    if (t && t->dtype == QUAROT_DTYPE_F32) ((float*)t->data)[5] = 1e6f;
    memset(&so, 0, sizeof so);
    ok = ok && t && qx_st_save(&s, p_over, &so, &e) == QUAROT_OK;
    if (!ok) printf("    setup: %s\n", e.msg);
    qx_store_free(&s);
    ok = ok && write_tokenizer(tmp_path("tokenizer.bin")) && write_str(p_exists, "someone's file");
    f = fopen(p_text, "w");
    for (i = 0; f && i < 300; ++i) fprintf(f, "some text %d. ", i);
    if (f) fclose(f);
    ok = ok && f && write_str(p_yaml, "apiversion: modelslim_v1\nspec:\n  process:\n    - type: quarot\n");
    {
        char y[2400];
        snprintf(y, sizeof y, "apiversion: modelslim_v1\nspec:\n  prior:\n    - process:\n        - type: adapt_rotation\n"
                 "          stage: 1\n          layer_type: [nomatch]\n      dataset: %s\n  process:\n    - type: adapt_rotation\n"
                 "      stage: 2\n", p_text);
        ok = ok && write_str(p_adapt, y);
    }
    {   /* a shared directory whose stories260K exists but is not a model */
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/models/stories260K", p_shared);
        ok = ok && mkdir(p_shared, 0777) == 0 && mkdir(tmp_path("ec_shared/models"), 0777) == 0 && mkdir(dir, 0777) == 0 &&
             write_str(tmp_path("ec_shared/models/stories260K/stories260K.bin"), "not a model") &&
             write_str(tmp_path("ec_shared/models/stories260K/tok512.bin"), "not a tokenizer");
    }
    return ok;
}

static void run_cases(const char* name, const ec_case* c, int n) {
    char args[8192];
    int k, rc;
    for (k = 0; k < n; ++k) {
        expand(c[k].cmd, args, sizeof args);
        if (strncmp(args, "demo", 4) == 0) {
            char pre[1200];
            snprintf(pre, sizeof pre, "QUAROT_SHARED='%s'", p_shared);
            rc = run_prog(pre, g_bin, "%s", args);
        } else {
            rc = run_prog("", g_bin, "%s", args);
        }
        QT_CHECKF(rc == c[k].code && count_lines(g_err) == 1 && strncmp(g_err, "quarot ", 7) == 0,
                  "%s: `%s`: exit %d (the table says %d), stderr: %s", name, c[k].cmd, rc, c[k].code, g_err);
        QT_CHECKF(!qx_path_exists(p_out), "%s: `%s` left %s", name, c[k].cmd, p_out);
        remove(p_out);
    }
}

#define CASES(name, ...)                                                  \
    do {                                                                  \
        static const ec_case cs[] = {__VA_ARGS__};                        \
        run_cases(name, cs, (int)(sizeof cs / sizeof cs[0]));             \
    } while (0)

static void test_every_command(void) {
    if (!setup()) { QT_CHECK(0); return; }
    CASES("rotate", {"rotate %M %O --bogus", 1}, {"rotate %N %O", 2}, {"rotate %M %E", 3}, {"rotate %V %O --dtype f16", 4});
    CASES("quantize", {"quantize %M %O --bogus", 1}, {"quantize %N %O", 2}, {"quantize %M %E", 3},
          {"quantize %M %O --w-quant gptq --calib-text %T --seq-len 4096", 4});
    CASES("eval", {"eval %M --text %T --bogus", 1}, {"eval %N --text %T", 2}, {"eval %M --text %T --seq-len 4096", 4});
    CASES("plot", {"plot %M --text %T -o %O --bogus", 1}, {"plot %N --text %T -o %O", 2}, {"plot %M --text %T -o %E", 3},
          {"plot %M --text %T -o %O --layer 99", 4});
    CASES("calibrate", {"calibrate %M --text %T -o %O --bogus", 1}, {"calibrate %N --text %T -o %O", 2},
          {"calibrate %M --text %T -o %E", 3}, {"calibrate %M --text %T -o %O --seq-len 4096", 4});
    CASES("inspect", {"inspect %M --bogus", 1}, {"inspect %N", 2});
    CASES("tokenize", {"tokenize %M --bogus", 1}, {"tokenize %N --prompt hi", 2});
    CASES("generate", {"generate %M --bogus", 1}, {"generate %N", 2}, {"generate %M --context 4 --prompt 'a b c d e f g h i j'", 4});
    CASES("run", {"run %Y --model %M --save %O --bogus", 1}, {"run %N --model %M --save %O", 2}, {"run %Y --model %M --save %E", 3},
          {"run %A --model %M --save %O", 4});
    CASES("demo", {"demo --bogus", 1}, {"demo --windows 1 --quiet", 2});   /* no progress lines when slow (qemu) */
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_exit_codes")) return 1;
    QT_RUN(test_every_command);
    cu_finish();
    return qt_finish("test_exit_codes");
}
