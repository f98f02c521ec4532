/* A kill at any publish step of `quarot rotate` and `quarot quantize` leaves the previous output or
   the new one, never a mix (test_reliability.c checks the protocol on a dense llama; this runs it on
   the layouts the model families bring): a Mixtral GGUF with 3-D experts (written one expert at a
   time), a Qwen2-MoE Hugging Face directory with one tensor per expert, a shared expert and dense
   layers between the MoE ones (decoder_sparse_step 2), and a Phi-3 directory with fused q|k|v and
   gate|up. Outputs: rotate in the input's format (a directory, or one GGUF file), quantize to a Q4_0
   GGUF (Mixtral, Phi-3) and to the packed W4A4 file. Each run is killed before publish step
   k = 1, 2, ... (QX_FAULT_PUBLISH=k) over a copy of an older output (another seed or other bits)
   until a run completes; the files at OUT are compared byte for byte (FNV-1a per file) with the
   older and the newer output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "publish_util.h"
#include "moe_util.h"
#include "formats/qx_gguf.h"
#include "moe_store.h"
#include "model/qx_synth.h"

/* `quarot CMD IN OUT FLAGS` with old_flags, then new_flags, then the kill loop over the first with
   the second. out: a name in g_tmp. */
static void kill_case(const char* what, const char* cmd, const char* in, const char* out, const char* old_flags,
                      const char* new_flags) {
    char oldp[1024], newp[1024], outp[1024], args[4400];
    snprintf(oldp, sizeof oldp, "%s/old_%s", g_tmp, out);
    snprintf(newp, sizeof newp, "%s/new_%s", g_tmp, out);
    snprintf(outp, sizeof outp, "%s/%s", g_tmp, out);
    QT_EQ_INT(CLI("%s '%s' '%s' %s --quiet", cmd, in, oldp, old_flags), 0);
    QT_EQ_INT(CLI("%s '%s' '%s' %s --quiet", cmd, in, newp, new_flags), 0);
    snprintf(args, sizeof args, "%s '%s' '%s' %s --quiet", cmd, in, outp, new_flags);
    pu_kill_loop(what, out, oldp, newp, args);
}

static void test_mixtral_gguf(void) {
    static mt_model m;
    const char* in = tmp_path("mixtral.gguf");
    mt_build(&m, FAM_MIXTRAL, 1, 7);
    QT_CHECK(mt_save(&m, in, 1));
    mt_free(&m);
    kill_case("mixtral rotate -> GGUF", "rotate", in, "mx_rot.gguf", "--seed 1", "--seed 2");
    kill_case("mixtral quantize -> Q4_0", "quantize", in, "mx_q.gguf", "--bits 8", "--bits 4");
    kill_case("mixtral quantize -> packed", "quantize", in, "mx_p.safetensors", "--bits 8", "--bits 4");
}

static void test_qwen2moe_dir(void) {
    static mt_model m;
    const char* in = tmp_path("qwen2moe");
    g_mlp_only = 0;   /* dense layers by decoder_sparse_step 2 only: the saved config.json has no mlp_only_layers */
    mt_build(&m, FAM_QWEN2, 0, 11);
    QT_CHECK(mt_save(&m, in, 0));
    mt_free(&m);
    kill_case("qwen2moe rotate -> directory", "rotate", in, "q2_rot", "--seed 1", "--seed 2 --online");
    kill_case("qwen2moe quantize -> packed", "quantize", in, "q2_p.safetensors", "--bits 8", "--bits 4");
}

static void test_phi3_dir(void) {
    qx_synth_desc d;
    qx_store s;
    qx_st_save_opts so;
    qx_err e;
    const char* in = tmp_path("phi3");
    memset(&d, 0, sizeof d);
    d.arch = "phi3";
    d.seed = 5;
    memset(&so, 0, sizeof so);
    QT_OK(qx_synth_model(&s, &d, &e));
    QT_OK(qx_st_save(&s, in, &so, &e));
    qx_store_free(&s);
    kill_case("phi3 rotate -> directory", "rotate", in, "p3_rot", "--seed 1 --online", "--seed 2");
    kill_case("phi3 quantize -> Q4_0", "quantize", in, "p3_q.gguf", "--bits 8", "--bits 4");
    kill_case("phi3 quantize -> packed", "quantize", in, "p3_p.safetensors", "--bits 8", "--bits 4");
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_kill_families")) return 1;
    QT_RUN(test_mixtral_gguf);
    QT_RUN(test_qwen2moe_dir);
    QT_RUN(test_phi3_dir);
    cu_finish();
    return qt_finish("test_kill_families");
}
