/* qx_opts.h - the one option parser of the `quarot` commands, and the option groups they share.

   Each command describes its options as tables (in the style of llama.cpp's common/arg.cpp): an
   entry gives the option's names, its argument's placeholder, its kind (flag, integer or number in a
   range, string, a word from a list, or a parse callback), where the value goes (an offsetof into the
   command's options struct, and optionally a "given" marker), the default as help shows it, the
   flag of QuaRot's reference scripts it corresponds to, and its help text. qx_opts_parse reads argv
   against the command's tables and the shared groups it takes; --help prints the help generated
   from the same tables, so what is documented is what is accepted.

   Parsing, for every command alike:
     --name VALUE and --name=VALUE (and -x VALUE, -x=VALUE for a short name); a flag takes no value,
       so --flag=... is an unknown option; a repeated option's last value wins
     -h, --help    prints the help on stdout and ends the command with exit code 0
     "-" and words not starting with '-' are operands, taken in order; one more than the command
       has is a usage error ("unexpected argument"; "unknown argument" for a command without any)
     --            ends the options (qx_cli_end_of_options: later words are operands)
   Errors are the usage error line of qx_cli.h and exit code 1: "unknown option '%s' (see quarot CMD
   --help)", "option %s needs a value (see quarot CMD --help)", and the range errors of qx_cli_int /
   qx_cli_float naming the option as typed. */
#ifndef QX_OPTS_H
#define QX_OPTS_H

#include "cli/qx_cli.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qx_opt_kind {
    QX_OPT_END = 0,     /* ends a table */
    QX_OPT_FLAG,        /* no value: the int field becomes 1 */
    QX_OPT_FLAG_OFF,    /* no value: the int field becomes 0 */
    QX_OPT_INT,         /* an integer in [lo, hi] (an int or int64_t field) */
    QX_OPT_FLOAT,       /* a number in [flo, fhi], ends open as `open` says (a double or float field) */
    QX_OPT_STRING,      /* the value itself (a const char* field) */
    QX_OPT_CHOICE,      /* one word of `choices`, stored as its number (an int field) */
    QX_OPT_CUSTOM       /* `fn` parses the value */
} qx_opt_kind;

enum { QX_OPT_OPEN_LO = 1, QX_OPT_OPEN_HI = 2 };

typedef struct qx_opt_choice {
    const char* word;
    int value;
} qx_opt_choice;

struct qx_opt;
/* QX_OPT_CUSTOM: parses value into the options (base: the struct the entry's offsets are relative
   to); for INT / FLOAT / CHOICE entries: a further check of the value just stored. name is the
   option as typed. Returns 1, or 0 after printing the usage error (qx_cli_fail). */
typedef int (*qx_opt_fn)(qx_cli* cli, const struct qx_opt* o, const char* name, const char* value, void* base);

typedef struct qx_opt {
    qx_opt_kind kind;
    const char* name;              /* "--threads", or a short name alone ("-n") */
    const char* alias;             /* another name ("-q" for --quiet, "--asym" for --w-asym); NULL */
    const char* arg;               /* the value's placeholder ("N", "FILE"); CHOICE: NULL lists the words */
    size_t off, size;              /* the field: QX_AT(type, member) */
    size_t given;                  /* QX_GIVEN(type, member): an int set to 1 when the option is given */
    int64_t lo, hi;                /* INT */
    double flo, fhi;               /* FLOAT: checked as qx_cli_float does, then an open end excluded */
    unsigned open;                 /* FLOAT: QX_OPT_OPEN_LO / QX_OPT_OPEN_HI */
    const qx_opt_choice* choices;  /* CHOICE: ends with a NULL word */
    const char* bad;               /* CHOICE: the error after "NAME: 'VALUE' " (default "is not a, b or c") */
    qx_opt_fn fn;
    unsigned id;                   /* shared groups: the bit a command takes the entry by (qx_opt_use.pick) */
    const char* def;               /* the default, as help shows it: "(default: DEF)" */
    const char* ref;               /* the flag of QuaRot's scripts, shown as "[REF]" */
    const char* help;              /* wrapped to the help's width; '\n' starts a paragraph, whose leading
                                      spaces indent it */
} qx_opt;

#define QX_AT(type, member) .off = offsetof(type, member), .size = sizeof(((type*)0)->member)
#define QX_GIVEN(type, member) .given = offsetof(type, member) + 1

typedef struct qx_opt_group {
    const char* title;             /* help heading ("options:"); NULL: the entries continue the one before */
    const qx_opt* opts;            /* ends with a QX_OPT_END entry */
    const char* note;              /* printed after the entries; NULL */
} qx_opt_group;

/* A group a command takes: its struct lies at `off` in the command's options; pick (0: all) the ids
   of a shared group's entries it accepts; title (NULL: the group's) heads it in help. */
typedef struct qx_opt_use {
    const qx_opt_group* group;
    size_t off;
    unsigned pick;
    const char* title;
} qx_opt_use;

typedef struct qx_opt_operand {
    const char* name;              /* "MODEL", "IN" */
    size_t off;                    /* a const char* in the command's options */
} qx_opt_operand;

#define QX_OPTS_MAX_USES 16

typedef struct qx_opts_cmd {
    const char* name;              /* "rotate" */
    const char* synopsis;          /* after "usage: quarot NAME " (NULL: the operands and "[options]") */
    const char* about;             /* the description, between the usage line and the options */
    qx_opt_operand operands[3];    /* ends with a NULL name */
    int usage_on_excess;           /* an extra operand's error quotes the usage line, not "one MODEL" */
    qx_opt_use uses[QX_OPTS_MAX_USES];   /* ends with a NULL group; help lists them in this order */
    const char* epilog;            /* after the options: what is printed, memory, exit codes */
    const char* (*epilog_arg)(void);     /* when set, epilog is a format taking this one string */
} qx_opts_cmd;

/* qx_opts_parse's result when the command should go on; otherwise it returns the command's exit code
   (QX_EXIT_OK after --help, QX_EXIT_USAGE after the error line). */
#define QX_OPTS_RUN (-1)

/* Parses argv[1..argc) (argv[0]: the command's name) into opts, the command's options struct
   (defaults set by the caller). cli: the command's (qx_cli_init), for the error lines. */
int qx_opts_parse(const qx_opts_cmd* cmd, qx_cli* cli, int argc, char** argv, void* opts);
/* The help generated from the tables. */
void qx_opts_help(const qx_opts_cmd* cmd, FILE* f);
/* Whether a command's use of a group accepts the entry. */
int qx_opts_takes(const qx_opt_use* u, const qx_opt* o);
/* The word of a choice list for value (NULL when none). */
const char* qx_opt_word(const qx_opt_choice* choices, int value);

/* ---- shared groups ---- */

/* common: --threads N, --quiet (-q where a command takes it), --force (-f) */
typedef struct qx_opts_common {
    int64_t threads;               /* 0 = every online core */
    int quiet, force;
} qx_opts_common;
enum { QX_COMMON_THREADS = 1u << 0, QX_COMMON_QUIET = 1u << 1, QX_COMMON_QUIET_Q = 1u << 2, QX_COMMON_FORCE = 1u << 3,
       QX_COMMON_FORCE_F = 1u << 4 };
extern const qx_opt_group qx_opts_common_group;

/* input: --tokenizer FILE, --tokens FILE (token ids instead of a text), --hooks FILE */
typedef struct qx_opts_input {
    const char *tokenizer, *tokens, *hooks;
} qx_opts_input;
enum { QX_INPUT_TOKENIZER = 1u << 0, QX_INPUT_TOKENS = 1u << 1, QX_INPUT_HOOKS = 1u << 2 };
extern const qx_opt_group qx_opts_input_group;

/* rotation: --rotation KIND, --context FILE, --seed N, --block-size N, --no-r2, --max-tp-size N,
   --no-online, --strict (as quarot rotate has them) */
enum { QX_ROT_HADAMARD = 0, QX_ROT_RANDOM = 1, QX_ROT_ADAPT = 2, QX_ROT_NONE = 3, QX_ROT_LEARNED = 4 };
extern const qx_opt_choice qx_opts_rotations[];   /* hadamard, random, adapt, none, learned */
typedef struct qx_opts_rotation {
    int rotation;                  /* QX_ROT_* (hadamard) */
    const char* context;           /* Adapt Rotation stage-1 context */
    const char* rotations;         /* learned rotations (SpinQuant, eval/qx_spin.h) */
    int64_t seed;                  /* 0 */
    int64_t block_size;            /* -1: full hidden */
    int64_t max_tp_size;           /* 1 */
    int no_r2, no_online, strict;
    int rotation_given, seed_given, block_given;
} qx_opts_rotation;
enum { QX_ROTATION_KIND = 1u << 0, QX_ROTATION_CONTEXT = 1u << 1, QX_ROTATION_SEED = 1u << 2, QX_ROTATION_BLOCK = 1u << 3,
       QX_ROTATION_NO_R2 = 1u << 4, QX_ROTATION_TP = 1u << 5, QX_ROTATION_NO_ONLINE = 1u << 6, QX_ROTATION_STRICT = 1u << 7,
       QX_ROTATION_ROTATIONS = 1u << 8 };
extern const qx_opt_group qx_opts_rotation_group;
void qx_opts_rotation_init(qx_opts_rotation* r);

/* quantization levers of QuaRot's fake_quant/main.py: --w-asym (--asym), --w-clip, --a-asym,
   --k-asym / --v-asym / --k-sym / --v-sym, --k-clip R, --v-clip R */
typedef struct qx_opts_quant {
    int w_asym, w_clip, a_asym;
    int k_asym, v_asym;            /* 1 (--k-sym / --v-sym clear them) */
    double k_clip, v_clip;         /* set by the command (1.0) */
} qx_opts_quant;
enum { QX_QUANT_W_ASYM = 1u << 0, QX_QUANT_ASYM = 1u << 1, QX_QUANT_W_CLIP = 1u << 2, QX_QUANT_A_ASYM = 1u << 3,
       QX_QUANT_KV_ASYM = 1u << 4, QX_QUANT_KV_CLIP = 1u << 5 };
extern const qx_opt_group qx_opts_quant_group;

/* GPTQ: --w-quant rtn|gptq, --calib-text FILE, --act-order */
enum { QX_WQ_RTN = 0, QX_WQ_GPTQ = 1 };
typedef struct qx_opts_gptq {
    int w_quant;                   /* QX_WQ_* (rtn) */
    const char* calib_text;
    int act_order;
} qx_opts_gptq;
extern const qx_opt_group qx_opts_gptq_group;

/* windowing of a text: --seq-len N, --windows N, --windowing stream|docs */
typedef struct qx_opts_windowing {
    int64_t seq_len;               /* 256 */
    int64_t windows;               /* 0 = all */
    int windowing;                 /* QX_WINDOWING_STREAM / _DOCS (qx_eval.h) */
} qx_opts_windowing;
extern const qx_opt_group qx_opts_windowing_group;
void qx_opts_windowing_init(qx_opts_windowing* w);

/* ---- the commands' options (each in its examples/cli/qx_cmd_<name>.c) ---- */
extern const qx_opts_cmd qx_cmd_rotate_spec, qx_cmd_quantize_spec, qx_cmd_eval_spec, qx_cmd_inspect_spec, qx_cmd_plot_spec,
    qx_cmd_calibrate_spec, qx_cmd_run_spec, qx_cmd_tokenize_spec, qx_cmd_generate_spec, qx_cmd_demo_spec;

#ifdef __cplusplus
}
#endif
#endif
