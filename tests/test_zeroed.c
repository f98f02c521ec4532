/* Every public quarot.h function that takes a library struct, called with a zeroed struct (what a
   caller has after a failed init, or before any init), and the NULL-with-n>0 cases: each must
   return an error code (or do nothing, for the void functions documented so), never crash or
   divide by zero. Each call runs in a child process, so one crash does not hide the others; the
   child's exit status is the result code (+1), 200 for "returned normally" from void functions. */
#include "quarot.h"
#include "qt.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn in a child; returns its exit code, or -signal when it crashed. */
static int in_child(int (*fn)(void)) {
    pid_t pid;
    int st = 0;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        alarm(20);
        _exit(fn());
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1000;
    if (WIFSIGNALED(st)) return -WTERMSIG(st);
    return WEXITSTATUS(st);
}

#define ERRCODE(expr) ((expr) == QUAROT_OK ? 1 : 2)   /* 2: an error code came back */

static float xs[64 * 4];
static double xd[64 * 4];
static char work[1 << 16];

static int z_rotation_apply_f32(void) { quarot_rotation r; memset(&r, 0, sizeof r); return ERRCODE(quarot_rotation_apply_f32(&r, xs, 4, 64, 0, work, sizeof work)); }
static int z_rotation_apply_f64(void) { quarot_rotation r; memset(&r, 0, sizeof r); return ERRCODE(quarot_rotation_apply_f64(&r, xd, 4, 64, 0, work, sizeof work)); }
static int z_rotation_apply_nowork(void) { quarot_rotation r; memset(&r, 0, sizeof r); return ERRCODE(quarot_rotation_apply_f32(&r, xs, 4, 64, 1, NULL, 0)); }
static int z_rotation_to_dense(void) { quarot_rotation r; memset(&r, 0, sizeof r); return ERRCODE(quarot_rotation_to_dense_f64(&r, xd)); }
/* a rotation whose init failed */
static int z_rotation_failed_init(void) {
    quarot_rotation r;
    quarot_rotation_desc d;
    memset(&r, 0, sizeof r);
    memset(&d, 0, sizeof d);
    d.n = 64;
    d.block_size = 7;   /* does not divide n: init fails */
    if (quarot_rotation_init(&r, &d, NULL) == QUAROT_OK) return 1;
    return ERRCODE(quarot_rotation_apply_f32(&r, xs, 4, 64, 0, work, sizeof work));
}
/* kinds set but the rest zero (a struct filled by hand) */
static int z_rotation_kind_only(void) {
    quarot_rotation r;
    int k, bad = 0;
    for (k = 1; k <= 5; ++k) {
        memset(&r, 0, sizeof r);
        r.kind = (quarot_rotation_kind)k;
        r.n = 64;
        r.block = 64;
        bad |= quarot_rotation_apply_f32(&r, xs, 4, 64, 0, work, sizeof work) == QUAROT_OK && k != QUAROT_ROTATION_IDENTITY;
        bad |= quarot_rotation_apply_f64(&r, xd, 4, 64, 0, work, sizeof work) == QUAROT_OK && k != QUAROT_ROTATION_IDENTITY;
    }
    return bad ? 1 : 2;
}
static int z_rotation_workspace(void) { quarot_rotation r; memset(&r, 0, sizeof r); (void)quarot_rotation_workspace_size(&r); return 2; }
static int z_hadamard_apply(void) {
    quarot_hadamard_plan p;
    memset(&p, 0, sizeof p);
    return ERRCODE(quarot_hadamard_apply_f32(&p, NULL, xs, 4, 64, work, sizeof work)) == 2 &&
           ERRCODE(quarot_hadamard_apply_f64(&p, NULL, xd, 4, 64, work, sizeof work)) == 2 ? 2 : 1;
}
static int z_hadamard_ws(void) { quarot_hadamard_plan p; memset(&p, 0, sizeof p); (void)quarot_hadamard_workspace_size(&p); return 2; }
static int z_online_apply(void) { quarot_online_hook h; memset(&h, 0, sizeof h); return ERRCODE(quarot_online_apply(&h, xs, 4, 64, work, sizeof work)); }
static int z_online_ws(void) { quarot_online_hook h; memset(&h, 0, sizeof h); (void)quarot_online_workspace_size(&h); return 2; }
static int z_online_list(void) {
    quarot_online_list l;
    size_t need = 0;
    char buf[256];
    memset(&l, 0, sizeof l);
    (void)quarot_online_find(&l, 0, QUAROT_SITE_DOWN_INPUT);
    if (quarot_online_write(&l, buf, sizeof buf, &need) != QUAROT_OK) return 1;   /* an empty list is fine */
    quarot_online_list_free(&l);
    return 2;
}
static int z_online_read_null(void) {
    quarot_online_list l;
    quarot_online_list_init(&l, NULL);
    return ERRCODE(quarot_online_read(&l, NULL, 10, NULL, 0));
}
static int z_command_apply(void) {
    quarot_command c;
    quarot_rotation r;
    quarot_tensor t;
    memset(&c, 0, sizeof c);
    memset(&r, 0, sizeof r);
    memset(&t, 0, sizeof t);
    return ERRCODE(quarot_command_apply(&c, &r, &t, NULL, NULL));
}
static int z_processor(void) {
    quarot_processor p;
    memset(&p, 0, sizeof p);
    if (quarot_processor_pre_run(&p) == QUAROT_OK || quarot_processor_run_layer(&p, 0) == QUAROT_OK ||
        quarot_processor_post_run(&p) == QUAROT_OK)
        return 1;
    quarot_processor_free(&p);
    return 2;
}
static int z_rotate_model(void) {
    quarot_model m;
    quarot_rotate_desc d;
    memset(&m, 0, sizeof m);
    memset(&d, 0, sizeof d);
    return ERRCODE(quarot_rotate_model(&m, &d));
}
static int z_capture(void) {
    quarot_adapt_capture c;
    memset(&c, 0, sizeof c);
    (void)quarot_adapt_capture_matches(&c, "model.layers.0.self_attn.q_proj");
    return ERRCODE(quarot_adapt_capture_add(&c, "model.layers.0.self_attn.q_proj", xs, 4, 64));
}
static int z_capture_list(void) { quarot_adapt_capture c; char b[64]; memset(&c, 0, sizeof c); (void)quarot_adapt_capture_list(&c, b, sizeof b); return 2; }
static int z_stage1(void) {
    quarot_adapt_capture c;
    quarot_adapt_desc d;
    quarot_adapt_context x;
    memset(&c, 0, sizeof c);
    memset(&d, 0, sizeof d);
    memset(&x, 0, sizeof x);
    return ERRCODE(quarot_adapt_stage1(&c, &d, &x, NULL));
}
static int z_context(void) {
    quarot_adapt_context x;
    quarot_rotation r;
    size_t need = 0;
    char buf[64];
    memset(&x, 0, sizeof x);
    if (quarot_adapt_context_rotation(&x, &r, NULL) == QUAROT_OK) return 1;
    if (quarot_adapt_context_write(&x, buf, sizeof buf, &need) == QUAROT_OK) return 1;
    quarot_adapt_context_free(&x);
    return 2;
}
static int z_plan(void) {
    quarot_plan p;
    memset(&p, 0, sizeof p);
    (void)quarot_plan_add_fusion(&p, 0, "a", NULL);
    (void)quarot_plan_add_fused_linear(&p, "b", NULL);
    (void)quarot_plan_set_layers(&p, 2);
    quarot_plan_free(&p);
    return 2;
}
static int z_tensor(void) {
    quarot_tensor t;
    float row[4];
    memset(&t, 0, sizeof t);
    if (quarot_tensor_validate(&t) == QUAROT_OK) return 1;
    (void)quarot_tensor_nbytes(&t);
    (void)quarot_tensor_nelements(&t);
    (void)quarot_tensor_nrows(&t);
    (void)quarot_tensor_is_contiguous(&t);
    if (quarot_tensor_get_row_f32(&t, 0, row) == QUAROT_OK || quarot_tensor_set_row_f32(&t, 0, row) == QUAROT_OK) return 1;
    return 2;
}
/* NULL with n > 0: the functions return without touching anything */
static int z_rng_zeroed(void) {
    quarot_rng g;
    double v;
    memset(&g, 0, sizeof g);
    v = quarot_rng_normal(&g);   /* the all-zero state would loop forever */
    return v == v && quarot_rng_u64(&g) != quarot_rng_u64(&g) ? 2 : 1;
}
static int z_rng_null(void) {
    quarot_rng_signs_f32(NULL, xs, 4);
    (void)quarot_rng_u64(NULL);
    quarot_rng_signs_f32(NULL, NULL, 4);
    return 2;
}
static int z_convert_null(void) {
    quarot_f32_to_f16(NULL, NULL, 4);
    quarot_f16_to_f32(NULL, NULL, 4);
    quarot_f32_to_bf16(NULL, NULL, 4);
    quarot_bf16_to_f32(NULL, NULL, 4);
    return 2;
}
static void task(void* arg, int64_t i) { (void)arg; (void)i; }
static int z_parallel_null(void) {
    quarot_env_parallel_for(NULL, NULL, NULL, 4);
    quarot_env_parallel_for(NULL, task, NULL, 4);
    return 2;
}

/* sizes whose byte extent overflows int64 with a single row, and a capture with rows x stride beyond it */
static int z_rows_overflow(void) {
    int64_t n = (int64_t)1 << 62;
    if (quarot_fwht_f32(xs, n, 1, n, QUAROT_ISA_REF) != QUAROT_ERR_OVERFLOW) return 1;
    if (quarot_fwht_f64(xd, n, 1, n) != QUAROT_ERR_OVERFLOW) return 1;
    return 2;
}
static int z_capture_overflow(void) {
    quarot_adapt_capture c;
    quarot_adapt_desc d;
    quarot_result r;
    memset(&d, 0, sizeof d);
    if (quarot_adapt_capture_init(&c, 64, &d, NULL) != QUAROT_OK) return 1;
    r = quarot_adapt_capture_add(&c, "model.layers.0.self_attn.q_proj", xs, 3, INT64_MAX / 2);
    quarot_adapt_capture_free(&c);
    return r == QUAROT_ERR_OVERFLOW ? 2 : 1;
}

static void test_zeroed_structs(void) {
    static const struct { const char* name; int (*fn)(void); } cases[] = {
        {"quarot_rotation_apply_f32 (zeroed)", z_rotation_apply_f32},
        {"quarot_rotation_apply_f64 (zeroed)", z_rotation_apply_f64},
        {"quarot_rotation_apply_f32 (zeroed, no work)", z_rotation_apply_nowork},
        {"quarot_rotation_to_dense_f64 (zeroed)", z_rotation_to_dense},
        {"quarot_rotation_apply_f32 (failed init)", z_rotation_failed_init},
        {"quarot_rotation_apply (kind set, nothing built)", z_rotation_kind_only},
        {"quarot_rotation_workspace_size (zeroed)", z_rotation_workspace},
        {"quarot_hadamard_apply (zeroed plan)", z_hadamard_apply},
        {"quarot_hadamard_workspace_size (zeroed)", z_hadamard_ws},
        {"quarot_online_apply (zeroed hook)", z_online_apply},
        {"quarot_online_workspace_size (zeroed)", z_online_ws},
        {"quarot_online_list (zeroed)", z_online_list},
        {"quarot_online_read (NULL text, len 10)", z_online_read_null},
        {"quarot_command_apply (zeroed)", z_command_apply},
        {"quarot_processor_* (zeroed)", z_processor},
        {"quarot_rotate_model (zeroed model)", z_rotate_model},
        {"quarot_adapt_capture_add (zeroed)", z_capture},
        {"quarot_adapt_capture_list (zeroed)", z_capture_list},
        {"quarot_adapt_stage1 (zeroed)", z_stage1},
        {"quarot_adapt_context_* (zeroed)", z_context},
        {"quarot_plan_* (zeroed)", z_plan},
        {"quarot_tensor_* (zeroed)", z_tensor},
        {"quarot_rng_* (NULL, n > 0)", z_rng_null},
        {"quarot_rng_normal (zeroed rng)", z_rng_zeroed},
        {"quarot_f32_to_f16 & co (NULL, n > 0)", z_convert_null},
        {"quarot_env_parallel_for (NULL fn, n > 0)", z_parallel_null},
        {"quarot_fwht (n beyond INT64_MAX / elem, one row)", z_rows_overflow},
        {"quarot_adapt_capture_add (rows x stride overflow)", z_capture_overflow},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        int rc = in_child(cases[i].fn);
        QT_CHECKF(rc == 2, "%s: %s %d", cases[i].name, rc < 0 ? "crashed with signal" : "returned", rc < 0 ? -rc : rc);
    }
}

int main(void) {
    QT_RUN(test_zeroed_structs);
    return qt_finish("test_zeroed");
}
