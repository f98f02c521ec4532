/* rotate_util.h - the tool's rotate pipeline in-process, for tests that set its options directly
   (test_rotate_f32.c, test_moe.c, test_direct.c): load a model file as `quarot rotate` does, then
   qx_rotate_file with the caller's description and file options. Include after qt.h. */
#ifndef ROTATE_UTIL_H
#define ROTATE_UTIL_H

#include <string.h>

#include "formats/qx_load.h"
#include "pipeline/qx_rotate_file.h"

/* The model at `in` (qx_load_model, default options: mapped) rotated by qx_rotate_file with desc and
   ro: its result, stats in *st (may be NULL), error in *e. With desc->online set and no online_out,
   the hooks go to a list of the call's own, freed before it returns. */
QT_UNUSED static quarot_result ru_rotate_file(const char* in, quarot_rotate_desc* desc, const qx_rotate_file_opts* ro,
                                              qx_rotate_file_stats* st, qx_err* e) {
    quarot_online_list list;
    qx_load_opts lo;
    qx_store s;
    quarot_result r;
    int own = desc->online && !desc->online_out;
    memset(&lo, 0, sizeof lo);
    memset(e, 0, sizeof *e);
    if ((r = qx_load_model(in, &lo, &s, e)) != QUAROT_OK) return r;
    quarot_online_list_init(&list, NULL);
    if (own) desc->online_out = &list;
    r = qx_rotate_file(&s, desc, ro, st, e);
    if (own) desc->online_out = NULL;
    qx_store_free(&s);
    quarot_online_list_free(&list);
    return r;
}

/* qx_rotate_file_opts as the tests' drivers start them: out_path, force, input pages dropped as the
   tool drops them, `threads` threads. */
QT_UNUSED static qx_rotate_file_opts ru_file_opts(const char* out, int threads) {
    qx_rotate_file_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.out_path = out;
    ro.force = 1;
    ro.drop_pages = 1;
    ro.threads = threads;
    return ro;
}

#endif
