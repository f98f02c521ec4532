/* qx_rotcheck.c - see qx_rotcheck.h. */
#include "cli/qx_rotcheck.h"
#include "cli/qx_cli.h"

#include <stdio.h>
#include <string.h>

/* An offline rotation (R1, R2) of length n (asked = the block asked for, 0 = none): what
   quarot_rotation_init builds with fallback DEFAULT. */
static void qx__offline(qx_rotcheck_dim* d, const char* what, int64_t dim, int64_t n, int64_t asked, int random) {
    memset(d, 0, sizeof *d);
    snprintf(d->what, sizeof d->what, "%s", what);
    d->dim = dim;
    d->n = n;
    if (n <= 0 || dim % n != 0) {
        d->fails = 1;
        snprintf(d->text, sizeof d->text, "block %lld does not divide %lld: rotate refuses it", (long long)n, (long long)dim);
        return;
    }
    if (random) {
        d->block = 0;
        snprintf(d->text, sizeof d->text, "random orthogonal %lld x %lld%s (as asked)", (long long)n, (long long)n,
                 n < dim ? ", block-diagonal" : "");
        return;
    }
    if (quarot_hadamard_available(n)) {
        d->block = n;
        if (n < dim)
            snprintf(d->text, sizeof d->text, "%lld blocks of Hadamard %lld (as asked)", (long long)(dim / n), (long long)n);
        else
            snprintf(d->text, sizeof d->text, "Hadamard %lld", (long long)n);
        return;
    }
    d->fallback = 1;
    d->block = quarot_hadamard_largest_block(dim, n);
    if (d->block > 1) {
        d->warn = d->block < QX_ROTCHECK_MIN_BLOCK || (asked > 0 && d->block < asked);
        snprintf(d->text, sizeof d->text, "no Hadamard of order %lld: block-diagonal, %lld blocks of Hadamard %lld%s", (long long)n,
                 (long long)(dim / d->block), (long long)d->block,
                 d->warn ? (asked > 0 ? " (smaller than the block asked for)" : " (blocks < 64 barely spread outliers)") : "");
    } else {
        d->block = 0;
        d->warn = 1;
        snprintf(d->text, sizeof d->text, "no Hadamard block divides %lld: dense random orthogonal %lld x %lld instead", (long long)n,
                 (long long)n, (long long)n);
    }
}

/* An online rotation of length n (processor: Hadamard of n, else the largest block dividing n,
   else an error). */
static void qx__online(qx_rotcheck_dim* d, const char* what, int64_t dim, int64_t n) {
    memset(d, 0, sizeof *d);
    snprintf(d->what, sizeof d->what, "%s", what);
    d->dim = dim;
    d->n = n;
    d->block = n > 0 && quarot_hadamard_available(n) ? n : quarot_hadamard_largest_block(n, n);
    if (d->block <= 1) {
        d->fails = 1;
        d->block = 0;
        snprintf(d->text, sizeof d->text, "no Hadamard of order %lld or of any block dividing it: rotate fails", (long long)n);
    } else if (d->block < n) {
        d->fallback = 1;
        d->warn = d->block < QX_ROTCHECK_MIN_BLOCK;
        snprintf(d->text, sizeof d->text, "no Hadamard of order %lld: block-diagonal, %lld blocks of Hadamard %lld%s", (long long)n,
                 (long long)(n / d->block), (long long)d->block, d->warn ? " (blocks < 64 barely spread outliers)" : "");
    } else {
        snprintf(d->text, sizeof d->text, "Hadamard %lld%s", (long long)n, n < dim ? " per tensor-parallel slice" : "");
    }
}

int qx_rotcheck(const quarot_model_config* c, const qx_rotcheck_opts* o, qx_rotcheck_dim* out, int cap) {
    qx_rotcheck_dim d[8];
    qx_rotcheck_opts z;
    int n = 0, k;
    int64_t hd, tp;
    if (!o) { memset(&z, 0, sizeof z); o = &z; }
    hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
    tp = o->max_tp_size > 0 ? o->max_tp_size : 1;
    if (o->rotation == QUAROT_ROTATION_IDENTITY) {   /* --rotation none: nothing to build */
        memset(&d[n], 0, sizeof d[n]);
        snprintf(d[n].what, sizeof d[n].what, "R1 hidden");
        d[n].dim = d[n].n = d[n].block = c->hidden;
        snprintf(d[n].text, sizeof d[n].text, "none (identity: norms fused only)");
        ++n;
    } else if (o->rotation == QUAROT_ROTATION_MATRIX) {   /* learned dense R1 (and R2): nothing to fall back from */
        memset(&d[n], 0, sizeof d[n]);
        snprintf(d[n].what, sizeof d[n].what, "R1 hidden");
        d[n].dim = d[n].n = d[n].block = c->hidden;
        snprintf(d[n].text, sizeof d[n].text, "learned dense %lld x %lld", (long long)c->hidden, (long long)c->hidden);
        ++n;
    } else {
        qx__offline(&d[n++], "R1 hidden", c->hidden, o->block_size > 0 ? o->block_size : c->hidden,
                    o->block_size > 0 ? o->block_size : 0, o->rotation == QUAROT_ROTATION_RANDOM_ORTHOGONAL);
    }
    if (o->rotation == QUAROT_ROTATION_ADAPT) {   /* H of the context's block, then the learned dense R */
        size_t l = strlen(d[0].text);
        snprintf(d[0].text + l, sizeof d[0].text - l, ", times the learned R (Adapt Rotation)");
    }
    if (!o->no_r2 && o->rotation == QUAROT_ROTATION_MATRIX) {
        memset(&d[n], 0, sizeof d[n]);
        snprintf(d[n].what, sizeof d[n].what, "R2 head_dim");
        d[n].dim = d[n].n = d[n].block = hd;
        snprintf(d[n].text, sizeof d[n].text, "learned dense %lld x %lld per layer", (long long)hd, (long long)hd);
        ++n;
    } else if (!o->no_r2) {
        qx__offline(&d[n++], "R2 head_dim", hd, hd, 0, o->rotation == QUAROT_ROTATION_RANDOM_ORTHOGONAL);
    }
    if (o->online) {
        if (c->n_heads % tp || c->intermediate % tp) {
            memset(&d[n], 0, sizeof d[n]);
            snprintf(d[n].what, sizeof d[n].what, "online (tp %lld)", (long long)tp);
            d[n].fails = 1;
            snprintf(d[n].text, sizeof d[n].text, "max_tp_size %lld does not divide n_heads %lld and intermediate %lld", (long long)tp,
                     (long long)c->n_heads, (long long)c->intermediate);
            ++n;
        } else {
            qx__online(&d[n++], "online o_proj heads", c->n_heads, c->n_heads / tp);
            qx__online(&d[n++], "online down_proj", c->intermediate, c->intermediate / tp);
        }
        if (c->n_experts > 0) {   /* the processor's R4 of the routed experts and of the shared one */
            const int64_t ei = quarot_config_expert_width(c);
            const int64_t si = strcmp(c->arch, "mixtral") == 0 ? 0 : c->shared_intermediate;
            int k2;
            for (k2 = 0; k2 < 2; ++k2) {
                const int64_t w = k2 ? si : ei;
                if (w <= 0) continue;
                if (w % tp) {
                    memset(&d[n], 0, sizeof d[n]);
                    snprintf(d[n].what, sizeof d[n].what, "online %s (tp %d)", k2 ? "shared down_proj" : "expert down_proj",
                             (int)(tp & 0xffff));
                    d[n].fails = 1;
                    snprintf(d[n].text, sizeof d[n].text, "max_tp_size %lld does not divide %lld", (long long)tp, (long long)w);
                    ++n;
                } else {
                    qx__online(&d[n++], k2 ? "online shared down_proj" : "online expert down_proj", w, w / tp);
                }
            }
        }
    }
    if (o->r3) qx__online(&d[n++], "online q/k (R3)", hd, hd);
    for (k = 0; k < n && k < cap; ++k) out[k] = d[k];
    return n < cap ? n : cap;
}

int qx_rotcheck_cli(struct qx_cli* cli, const char* model, const char* label, const quarot_model_config* c,
                    const qx_rotcheck_opts* o, int strict, qx_rotcheck_dim* out, int cap, int* n_out) {
    int n = qx_rotcheck(c, o, out, cap), k;
    *n_out = n;
    for (k = 0; k < n; ++k) {
        if (!out[k].warn) continue;
        if (strict)
            return qx_cli_fail(cli, QX_EXIT_PROCESS, "%s: --strict: %s%s%s (%lld): %s", model, label ? label : "", label ? ": " : "",
                               out[k].what, (long long)out[k].dim, out[k].text);
        if (cli->progress_open) { fputc('\n', stderr); cli->progress_open = 0; }
        fprintf(stderr, "quarot %s: warning: %s%s%s (%lld): %s (--strict makes this an error)\n", cli->cmd, label ? label : "",
                label ? ": " : "", out[k].what, (long long)out[k].dim, out[k].text);
    }
    return QX_EXIT_OK;
}

int qx_rotcheck_summary(const char* prefix, const qx_rotcheck_dim* d, int n) {
    int k, w = 0;
    for (k = 0; k < n; ++k)
        if (d[k].warn) {
            printf("%sWARNING %s (%lld): %s\n", prefix, d[k].what, (long long)d[k].dim, d[k].text);
            ++w;
        }
    return w;
}
