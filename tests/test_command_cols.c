/* quarot_command_apply on the output side (columns of W, gathered into rows through a blocked
   transpose) gives exactly the bits of the input side applied to W's transpose, for axis lengths
   that are not a multiple of the transpose block (8) and column counts that leave a short last
   task (more than 64 columns), in f32, f16 and bf16, with the Kronecker (inner > 1) form too; and
   in single precision (quarot_command.f32: for powers of two the column kernels run on the tensor
   itself; otherwise the columns move through 16 x 16 in-register transposes on AVX-512, the rest
   element by element). */
#include "quarot.h"
#include "qt.h"

#include <stdlib.h>
#include <string.h>

/* Column r of w ([L][C], element size es) as doubles into col[L], read element by element. */
static void get_col(const quarot_tensor* w, quarot_dtype dt, size_t es, int64_t L, int64_t C, int64_t r, double* col) {
    int64_t k, one = 1;
    for (k = 0; k < L; ++k) {
        quarot_tensor e;
        quarot_tensor_init(&e, (char*)w->data + (size_t)(k * C + r) * es, dt, 1, &one);
        quarot_tensor_get_row_f64(&e, 0, col + k);
    }
}

static void check(quarot_dtype dt, int64_t L, int64_t C, int64_t outer, int64_t inner, int64_t n, int f32) {
    quarot_rotation q;
    quarot_rotation_desc d;
    quarot_command c;
    quarot_tensor w, wt;
    size_t es = quarot_dtype_size(dt);
    char* a = (char*)malloc((size_t)(L * C) * es);
    char* b = (char*)malloc((size_t)(L * C) * es);
    double* row = (double*)malloc((size_t)(L > C ? L : C) * sizeof(double));
    double* got = (double*)malloc((size_t)L * sizeof(double));
    int64_t ne[2], r, k, bad = 0;
    memset(&d, 0, sizeof d);
    d.n = n;
    d.seed = 5;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    ne[0] = C; ne[1] = L;   /* W: [L][C] */
    quarot_tensor_init(&w, a, dt, 2, ne);
    ne[0] = L; ne[1] = C;   /* W^T: [C][L] */
    quarot_tensor_init(&wt, b, dt, 2, ne);
    for (r = 0; r < L; ++r) {
        for (k = 0; k < C; ++k) row[k] = qt_normal();
        quarot_tensor_set_row_f64(&w, r, row);
    }
    for (r = 0; r < C; ++r) {   /* W^T from W's stored values */
        get_col(&w, dt, es, L, C, r, row);
        quarot_tensor_set_row_f64(&wt, r, row);
    }
    memset(&c, 0, sizeof c);
    c.f32 = f32;
    c.outer = outer;
    c.inner = inner;
    c.side = QUAROT_SIDE_OUTPUT;
    QT_OK(quarot_command_apply(&c, &q, &w, NULL, NULL));
    c.side = QUAROT_SIDE_INPUT;
    QT_OK(quarot_command_apply(&c, &q, &wt, NULL, NULL));
    for (r = 0; r < C; ++r) {   /* column r of W == row r of W^T, bit for bit */
        quarot_tensor_get_row_f64(&wt, r, row);
        get_col(&w, dt, es, L, C, r, got);
        if (memcmp(got, row, (size_t)L * sizeof(double)) != 0) ++bad;
    }
    QT_CHECKF(bad == 0, "%s%s L=%lld C=%lld outer=%lld inner=%lld: %lld columns differ", quarot_dtype_name(dt), f32 ? " (f32 arithmetic)" : "",
              (long long)L, (long long)C, (long long)outer, (long long)inner, (long long)bad);
    quarot_rotation_free(&q);
    free(a); free(b); free(row); free(got);
}

static void test_output_side_is_transposed_input_side(void) {
    static const quarot_dtype dts[] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    int i;
    for (i = 0; i < 4; ++i) {   /* the last: f32 with quarot_command.f32 (single precision, 16 x 16 transposes) */
        const quarot_dtype dt = dts[i < 3 ? i : 0];
        const int f32 = i == 3;
        check(dt, 20, 70, 1, 1, 20, f32);    /* L % 8 = 4, tasks of 64 + 6 columns */
        check(dt, 36, 131, 3, 1, 12, f32);   /* block-diagonal outer */
        check(dt, 30, 65, 1, 5, 6, f32);     /* Kronecker inner */
        check(dt, 7, 3, 1, 1, 7, f32);       /* fewer rows than one block */
        check(dt, 48, 200, 1, 1, 48, f32);   /* three whole blocks of 16 rows, tasks of 64 + 64 + 64 + 8 */
        /* powers of two: with f32 the column kernels on the tensor itself (quarot_hadamard_apply_cols_f32) */
        check(dt, 64, 85, 1, 1, 64, f32);    /* tasks of 64 (two 32-column blocks) + 21 (16 + 5) */
        check(dt, 4096, 37, 1, 1, 4096, f32);   /* three passes: the skewed buffer */
        check(dt, 64, 70, 2, 1, 32, f32);    /* block-diagonal outer */
        check(dt, 48, 66, 1, 3, 16, f32);    /* Kronecker inner: rows 3 apart */
        check(dt, 2, 40, 1, 1, 2, f32);      /* one stage */
    }
}

int main(void) {
    QT_RUN(test_output_side_is_transposed_input_side);
    return qt_finish("test_command_cols");
}
