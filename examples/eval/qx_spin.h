/* qx_spin.h - SpinQuant in the tool: R1 and one R2 per layer learned on calibration windows by
   quarot.h's trainer (>>train_model), the rotation file, and its checks before use.

   Learning (qx_spin_train): the model (not modified) is bound as a quarot_model; the first
   `nsamples` calibration windows of exactly seq_len tokens (BOS included) are the training set;
   quarot_trainer_run takes `batch` of them per step in a seeded order. The result starts from QuaRot's
   random Hadamard of the seed, so zero steps reproduce the QuaRot column.

   The rotation file is a safetensors file, like SpinQuant's R.bin converted to safetensors:
       R1                                  [hidden][hidden]      F64 (any float dtype is read)
       model.layers.{i}.self_attn.R2       [head_dim][head_dim]  one per layer (optional)
   rows are the row-vector convention of quarot.h (x <- x R; SpinQuant's torch R the same), and
   __metadata__ strings: "format" "quarot-rotations", "quarot.method" "spinquant", "quarot.model_digest"
   (qx_digest_files of the model's weight files: the model the rotations were learned on; absent in an
   imported file), "quarot.hidden", "quarot.head_dim", "quarot.n_layers", and informative ones (seed,
   steps, losses). Written through a temporary renamed into place (qx_st_writer: nothing half-written).

   Checks before use (qx_spin_check): shapes against the model's config (hidden, head_dim, layers), the
   digest (a file naming another model's digest is refused; a file without one, e.g. imported from
   SpinQuant, is accepted with shapes checked only), finite values, and orthogonality: each matrix
   must satisfy max|R^T R - I| <= QX_SPIN_ORTH_TOL (1e-4: a float32 export of a trained rotation is
   ~1e-6 .. 1e-5 off); it is then made orthogonal in double (quarot_polar_newton_schulz_f64 to 1e-13)
   so that the processor's MATRIX check (1e-6) holds. */
#ifndef QX_SPIN_H
#define QX_SPIN_H

#include "eval/qx_calib.h"
#include "eval/qx_evalkit.h"
#include "support/qx_file.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QX_SPIN_ORTH_TOL 1e-4

typedef struct qx_spin_rot {
    int64_t hidden, head_dim, n_layers;
    double* r1;                        /* [hidden][hidden] */
    double* r2;                        /* [n_layers][head_dim][head_dim], or NULL (no R2 in the file) */
    char digest[QX_DIGEST_LEN];        /* the model's digest ("" when the file names none) */
    char about[256];                   /* "spinquant, seed 0, 100 steps, loss 1.86 -> 1.68" or the file's method */
} qx_spin_rot;

void qx_spin_rot_free(qx_spin_rot* r);

typedef struct qx_spin_opts {
    quarot_train_desc desc;            /* the trainer's options (steps, lr, batch, quantizers, online, seed, ...) */
    int64_t nsamples;                  /* training windows; 0 = 128 */
    const quarot_env* env;             /* threads (may be NULL) */
} qx_spin_opts;

typedef struct qx_spin_stats {
    int64_t windows, tokens;           /* the training set */
    int steps_run;
    double first_loss, last_loss;      /* the first and last steps' batch losses */
    double max_orth;                   /* the largest max|R^T R - I| measured after a step */
    int reorthogonalized;              /* re-orthogonalizations over the run */
    double seconds;
} qx_spin_stats;

/* Learns the rotations of `model` on the windows w (only windows of exactly seq_len tokens are used;
   fewer than nsamples -> QUAROT_ERR_INVALID_ARGUMENT "calibration text too short"). out receives them
   with digest "" (the caller sets it). On a NaN the trainer's best rotations so far are returned in
   out along with QUAROT_ERR_NONFINITE and the trainer's message (which step). */
quarot_result qx_spin_train(const qx_store* model, const qx_windows* w, int64_t seq_len, const qx_spin_opts* o,
                            qx_spin_rot* out, qx_spin_stats* st, qx_err* e);

/* Writes r to path (see above); extra (may be NULL) is more __metadata__ as "key","value" pairs ending
   with NULL. An existing path is refused unless force. */
quarot_result qx_spin_save(const qx_spin_rot* r, const char* path, const char* const* extra, int force, qx_err* e);
/* Reads a rotation file (R1 required; R2 of every layer or of none). Errors name the file and the
   tensor: QUAROT_ERR_NOT_FOUND (no file, no R1), QUAROT_ERR_SHAPE_MISMATCH, QUAROT_ERR_PARSE. */
quarot_result qx_spin_load(const char* path, qx_spin_rot* r, qx_err* e);
/* Checks r against a model (see above) and re-orthogonalizes it; model_digest NULL or "" skips the
   digest comparison. worst (may be NULL) receives the largest max|R^T R - I| found. */
quarot_result qx_spin_check(qx_spin_rot* r, const quarot_model_config* c, const char* model_digest, double* worst, qx_err* e);
/* The digest of a model path's weight files (qx_weight_files + qx_digest_files). */
quarot_result qx_spin_model_digest(const char* model_path, char out[QX_DIGEST_LEN], qx_err* e);

/* QuaRot's recipe with the learned R1 (MATRIX) and per-layer R2 on a copy of src (layer-wise for a
   mapped store), the same online hooks as qx_ek_rotate_ex (online, r3). */
quarot_result qx_spin_rotate(const qx_store* src, const qx_spin_rot* r, int r3, int online, qx_store* dst,
                             quarot_online_list* hooks, char* recipe, size_t recipe_cap, qx_ek_layer_fn progress, void* user,
                             qx_err* e);

/* A quarot_rotate_desc folding the learned rotations (R1 MATRIX, R2 MATRIX per layer or no_r2). */
void qx_spin_desc(const qx_spin_rot* r, quarot_rotate_desc* d);

#ifdef __cplusplus
}
#endif
#endif
