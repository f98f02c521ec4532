/* test_opts.c - the option parser of the quarot commands (examples/cli/qx_opts.h): flags, values
   after '=' or in the next word, integer and number ranges with their messages, choices, missing
   values, unknown options, "--", operands, the help generated from the tables; and, for every
   command of the built tool, that `quarot CMD --help` names every option CMD accepts and that each
   of them is wired to the parser (a valued one without its value is that usage error). */
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_opts.h"

#include <fcntl.h>
#include <unistd.h>

static char g_msg[4096];   /* stderr of the last parse */

typedef struct t_opts {
    const char *a, *b;
    int flag, neg, pick, pick_given, pair, custom;
    int64_t n;
    int small;
    double x;
    float fx;
    const char* s;
    qx_opts_common c;
} t_opts;

static int t_even(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    (void)v;
    if (*(int*)((char*)base + o->off) % 2) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %d is odd", name, *(int*)((char*)base + o->off)), 0;
    return 1;
}

static int t_custom(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    (void)o;
    if (strcmp(v, "bad") == 0) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: bad", name), 0;
    ((t_opts*)base)->custom += (int)strlen(v);
    return 1;
}

static const qx_opt_choice t_picks[] = {{"one", 1}, {"two", 2}, {"three", 3}, {NULL, 0}};
static const qx_opt_choice t_pairs[] = {{"left", 10}, {"right", 20}, {NULL, 0}};

static const qx_opt t_table[] = {
    {QX_OPT_FLAG, "--flag", "-f", QX_AT(t_opts, flag), .help = "a flag"},
    {QX_OPT_FLAG_OFF, "--no-neg", QX_AT(t_opts, neg), .help = "clears neg"},
    {QX_OPT_INT, "--n", .arg = "N", QX_AT(t_opts, n), .lo = 0, .hi = 10, .def = "3", .ref = "--ref_n", .help = "an integer"},
    {QX_OPT_INT, "--small", .arg = "K", QX_AT(t_opts, small), .lo = -5, .hi = 5, .fn = t_even, .help = "an even int"},
    {QX_OPT_FLOAT, "--x", .arg = "R", QX_AT(t_opts, x), .flo = 0.0, .fhi = 1.0, .open = QX_OPT_OPEN_LO, .help = "a ratio"},
    {QX_OPT_FLOAT, "--fx", .arg = "F", QX_AT(t_opts, fx), .flo = -1.0, .fhi = 1.0, .help = "a float"},
    {QX_OPT_STRING, "--s", "-s", .arg = "TEXT", QX_AT(t_opts, s),
     .help = "a string option whose help text is long enough to be wrapped over more than one line of the help, so that the "
             "wrapping can be seen at work\n  an indented paragraph of its own\n  term  whose description is long enough to go on over "
             "the line's end, aligned with its first word\nand a last one"},
    {QX_OPT_CHOICE, "--pick", QX_AT(t_opts, pick), QX_GIVEN(t_opts, pick_given), .choices = t_picks, .help = "a word"},
    {QX_OPT_CHOICE, "--pair", .arg = "SIDE", QX_AT(t_opts, pair), .choices = t_pairs, .bad = "is neither left nor right",
     .help = "a side"},
    {QX_OPT_CUSTOM, "--custom", .arg = "V", .fn = t_custom, .help = "counts the bytes of its values"},
    {QX_OPT_END}
};
static const qx_opt_group t_group = {"options:", t_table, "(a note after the group)"};

static const qx_opts_cmd t_cmd = {
    .name = "t",
    .about = "A test command.\n",
    .operands = {{"A", offsetof(t_opts, a)}, {"B", offsetof(t_opts, b)}},
    .usage_on_excess = 1,
    .uses = {{&t_group, 0, 0, NULL}, {&qx_opts_common_group, offsetof(t_opts, c), QX_COMMON_THREADS | QX_COMMON_QUIET_Q, "common:"}},
    .epilog = "Exit codes: %s.\n",
    .epilog_arg = NULL,
};
static const qx_opts_cmd t_one = {.name = "t1", .operands = {{"MODEL", offsetof(t_opts, a)}}, .uses = {{&t_group, 0, 0, NULL}}};
static const qx_opts_cmd t_none = {.name = "t0", .uses = {{&t_group, 0, 0, NULL}}};

/* Parses the words of line (space separated) with cmd into *o (zeroed first, neg = 1); stderr into g_msg.
   The operands after "--" that the parser rewrites ("./-x", allocated) are freed at the next call. */
static int parse(const qx_opts_cmd* cmd, const char* line, t_opts* o) {
    static char buf[4096];
    static char* argv[64];
    static char* made[64];
    static int n_made;
    int argc = 0, rc, fd, saved, k;
    char path[64] = "/tmp/qx_test_opts_XXXXXX";
    qx_cli cli;
    FILE* f;
    size_t n;
    char* p;
    while (n_made > 0) free(made[--n_made]);
    snprintf(buf, sizeof buf, "%s %s", cmd->name, line);
    for (p = strtok(buf, " "); p && argc < 63; p = strtok(NULL, " ")) argv[argc++] = p;
    argv[argc] = NULL;
    memset(o, 0, sizeof *o);
    o->neg = 1;
    fd = mkstemp(path);
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    qx_cli_init(&cli, cmd->name, 0);
    rc = qx_opts_parse(cmd, &cli, argc, argv, o);
    for (k = 0; k < argc && argv[k]; ++k)
        if (argv[k] < buf || argv[k] >= buf + sizeof buf) made[n_made++] = argv[k];
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    g_msg[0] = '\0';
    f = fopen(path, "rb");
    n = f ? fread(g_msg, 1, sizeof g_msg - 1, f) : 0;
    g_msg[n] = '\0';
    if (f) fclose(f);
    remove(path);
    return rc;
}

/* 1 when the last parse printed exactly `want` (one line) */
static int said(const char* want) {
    char line[4200];
    snprintf(line, sizeof line, "%s\n", want);
    return strcmp(g_msg, line) == 0;
}

static void help_text(const qx_opts_cmd* cmd, char* out, size_t cap) {
    FILE* f = tmpfile();
    size_t n = 0;
    out[0] = '\0';
    if (!f) return;
    qx_opts_help(cmd, f);
    rewind(f);
    n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

static void test_flags_and_values(void) {
    t_opts o;
    QT_EQ_INT(parse(&t_cmd, "--flag --no-neg", &o), QX_OPTS_RUN);
    QT_CHECK(o.flag == 1 && o.neg == 0 && g_msg[0] == '\0');
    QT_EQ_INT(parse(&t_cmd, "-f", &o), QX_OPTS_RUN);
    QT_CHECK(o.flag == 1 && o.neg == 1);
    QT_EQ_INT(parse(&t_cmd, "--flag=1", &o), QX_EXIT_USAGE);   /* a flag takes no value */
    QT_CHECKF(said("quarot t: unknown option '--flag=1' (see quarot t --help)"), "%s", g_msg);
    QT_EQ_INT(parse(&t_cmd, "--n 4 --s x --fx 0.25 --x=0.5", &o), QX_OPTS_RUN);
    QT_CHECK(o.n == 4 && o.s && strcmp(o.s, "x") == 0 && o.fx == 0.25f && o.x == 0.5);
    QT_EQ_INT(parse(&t_cmd, "--n=7 -s=y --n 2 --small -4", &o), QX_OPTS_RUN);   /* the last value wins */
    QT_CHECK(o.n == 2 && strcmp(o.s, "y") == 0 && o.small == -4);
    QT_EQ_INT(parse(&t_cmd, "--s= --custom ab --custom=cde", &o), QX_OPTS_RUN);   /* an empty value; a callback */
    QT_CHECK(o.s && o.s[0] == '\0' && o.custom == 5);
    QT_EQ_INT(parse(&t_cmd, "--s --flag", &o), QX_OPTS_RUN);   /* a value may start with '-' */
    QT_CHECK(strcmp(o.s, "--flag") == 0 && o.flag == 0);
    QT_EQ_INT(parse(&t_cmd, "--nn 1", &o), QX_EXIT_USAGE);   /* a longer word is no prefix match */
    QT_CHECK(said("quarot t: unknown option '--nn' (see quarot t --help)"));
    QT_EQ_INT(parse(&t_cmd, "--threads 3 -q", &o), QX_OPTS_RUN);   /* a shared group, through its offset */
    QT_CHECK(o.c.threads == 3 && o.c.quiet == 1);
    QT_EQ_INT(parse(&t_cmd, "--force", &o), QX_EXIT_USAGE);   /* not picked from the group */
    QT_CHECK(said("quarot t: unknown option '--force' (see quarot t --help)"));
    QT_EQ_INT(parse(&t_cmd, "-f=1", &o), QX_EXIT_USAGE);
    QT_EQ_INT(parse(&t_cmd, "--bogus", &o), QX_EXIT_USAGE);
    QT_CHECK(said("quarot t: unknown option '--bogus' (see quarot t --help)"));
}

static void test_ranges(void) {
    t_opts o;
    QT_EQ_INT(parse(&t_cmd, "--n 11", &o), QX_EXIT_USAGE);
    QT_CHECKF(said("quarot t: --n: '11' is not an integer in [0, 10]"), "%s", g_msg);
    QT_EQ_INT(parse(&t_cmd, "--n=abc", &o), QX_EXIT_USAGE);
    QT_CHECK(said("quarot t: --n: 'abc' is not an integer in [0, 10]"));
    QT_EQ_INT(parse(&t_cmd, "--n 1x", &o), QX_EXIT_USAGE);
    QT_EQ_INT(parse(&t_cmd, "--n 0 --n 10", &o), QX_OPTS_RUN);   /* both ends are in */
    QT_EQ_INT(parse(&t_cmd, "--small 3", &o), QX_EXIT_USAGE);    /* the entry's check after the range */
    QT_CHECK(said("quarot t: --small: 3 is odd"));
    QT_EQ_INT(parse(&t_cmd, "--small 6", &o), QX_EXIT_USAGE);
    QT_CHECK(said("quarot t: --small: '6' is not an integer in [-5, 5]"));
    QT_EQ_INT(parse(&t_cmd, "--x 0", &o), QX_EXIT_USAGE);        /* the open end */
    QT_CHECKF(said("quarot t: --x: '0' is not a number in (0, 1]"), "%s", g_msg);
    QT_EQ_INT(parse(&t_cmd, "--x -0.5", &o), QX_EXIT_USAGE);     /* outside the closed range: qx_cli_float's message */
    QT_CHECK(said("quarot t: --x: '-0.5' is not a number in [0, 1]"));
    QT_EQ_INT(parse(&t_cmd, "--x 1", &o), QX_OPTS_RUN);
    QT_EQ_INT(parse(&t_cmd, "--fx 1e-400", &o), QX_EXIT_USAGE);   /* underflow, as qx_cli_float */
    QT_EQ_INT(parse(&t_cmd, "--fx nan", &o), QX_EXIT_USAGE);
    QT_EQ_INT(parse(&t_cmd, "--custom bad", &o), QX_EXIT_USAGE);
    QT_CHECK(said("quarot t: --custom: bad"));
}

static void test_choices_and_missing(void) {
    t_opts o;
    QT_EQ_INT(parse(&t_cmd, "--pick three", &o), QX_OPTS_RUN);
    QT_CHECK(o.pick == 3 && o.pick_given == 1);
    QT_EQ_INT(parse(&t_cmd, "--pair=right", &o), QX_OPTS_RUN);
    QT_CHECK(o.pair == 20 && o.pick_given == 0);
    QT_EQ_INT(parse(&t_cmd, "--pick four", &o), QX_EXIT_USAGE);
    QT_CHECKF(said("quarot t: --pick: 'four' is not one, two or three"), "%s", g_msg);
    QT_EQ_INT(parse(&t_cmd, "--pair up", &o), QX_EXIT_USAGE);
    QT_CHECK(said("quarot t: --pair: 'up' is neither left nor right"));
    QT_EQ_INT(parse(&t_cmd, "--pick One", &o), QX_EXIT_USAGE);   /* words are case-sensitive */
    QT_EQ_INT(parse(&t_cmd, "--n", &o), QX_EXIT_USAGE);
    QT_CHECKF(said("quarot t: option --n needs a value (see quarot t --help)"), "%s", g_msg);
    QT_EQ_INT(parse(&t_cmd, "--flag -s", &o), QX_EXIT_USAGE);   /* the name as typed */
    QT_CHECK(said("quarot t: option -s needs a value (see quarot t --help)"));
}

static void test_operands(void) {
    t_opts o;
    QT_EQ_INT(parse(&t_cmd, "x --flag y", &o), QX_OPTS_RUN);
    QT_CHECK(o.a && strcmp(o.a, "x") == 0 && o.b && strcmp(o.b, "y") == 0);
    QT_EQ_INT(parse(&t_cmd, "- y", &o), QX_OPTS_RUN);   /* "-" is an operand */
    QT_CHECK(strcmp(o.a, "-") == 0);
    QT_EQ_INT(parse(&t_cmd, "x y z", &o), QX_EXIT_USAGE);
    QT_CHECKF(said("quarot t: unexpected argument 'z' (usage: quarot t A B [options])"), "%s", g_msg);
    QT_EQ_INT(parse(&t_one, "x y", &o), QX_EXIT_USAGE);
    QT_CHECKF(said("quarot t1: unexpected argument 'y' (one MODEL; see quarot t1 --help)"), "%s", g_msg);
    QT_EQ_INT(parse(&t_none, "x", &o), QX_EXIT_USAGE);   /* a command without operands: every stray word */
    QT_CHECK(said("quarot t0: unknown argument 'x' (see quarot t0 --help)"));
    QT_EQ_INT(parse(&t_none, "--bogus", &o), QX_EXIT_USAGE);
    QT_CHECK(said("quarot t0: unknown argument '--bogus' (see quarot t0 --help)"));
    /* "--": what follows is operands, a word starting with '-' as the same relative path */
    QT_EQ_INT(parse(&t_cmd, "x -- --flag", &o), QX_OPTS_RUN);
    QT_CHECK(o.flag == 0 && strcmp(o.a, "x") == 0 && o.b && strcmp(o.b, "./--flag") == 0);
    QT_EQ_INT(parse(&t_cmd, "--flag -- -", &o), QX_OPTS_RUN);
    QT_CHECK(o.flag == 1 && strcmp(o.a, "-") == 0);
    QT_EQ_INT(parse(&t_cmd, "-- --n 1 2", &o), QX_EXIT_USAGE);
    QT_CHECKF(said("quarot t: unexpected argument '2' (usage: quarot t A B [options])"), "%s", g_msg);
    /* --help wherever it comes, unless an error came first */
    QT_EQ_INT(parse(&t_cmd, "x y z --help", &o), QX_EXIT_USAGE);
}

static void test_help(void) {
    static char h[16384];
    const qx_opt* p;
    const char* s;
    int longest = 0, len = 0;
    t_opts o;
    help_text(&t_cmd, h, sizeof h);
    QT_CHECKF(strncmp(h, "usage: quarot t A B [options]\n\nA test command.\n", 46) == 0, "%s", h);
    for (p = t_table; p->kind != QX_OPT_END; ++p) {   /* every entry, with its placeholder */
        char want[128];
        snprintf(want, sizeof want, "%s%s%s", p->name, p->arg ? " " : "", p->arg ? p->arg : "");
        QT_CHECKF(strstr(h, want) != NULL, "help lacks '%s':\n%s", want, h);
    }
    QT_CHECK(strstr(h, "  -f, --flag ") && strstr(h, "  --s, -s TEXT ") == NULL && strstr(h, "  -s, --s TEXT "));
    QT_CHECK(strstr(h, "--pick one|two|three") && strstr(h, "--pair SIDE"));   /* a choice lists its words */
    QT_CHECK(strstr(h, "an integer (default: 3) [--ref_n]\n"));
    QT_CHECK(strstr(h, "\ncommon:\n") && strstr(h, "--threads N") && strstr(h, "-q, --quiet") && !strstr(h, "--force"));
    QT_CHECK(strstr(h, "  (a note after the group)\n") && strstr(h, "  -h, --help") && strstr(h, "Exit codes: %s.\n"));
    /* wrapped before column 100, paragraphs on their own lines (an indented one indented) */
    for (s = h; *s; ++s) {
        if (*s == '\n') { if (len > longest) longest = len; len = 0; }
        else ++len;
    }
    QT_CHECKF(longest <= 100, "a help line of %d columns", longest);
    s = strstr(h, "a string option");
    QT_CHECK(s && strstr(s, "\n") < strstr(s, "at work"));
    QT_CHECK(s && strstr(s, "\n                          an indented paragraph of its own\n") && strstr(s, "\n                        and a last one\n"));
    QT_CHECKF(s && strstr(s, "\n                          term  whose description") && strstr(s, "\n                                aligned with"), "%s", s);
    /* --help through the parser: exit code 0 */
    fflush(stdout);
    {
        int saved = dup(1), fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        QT_EQ_INT(parse(&t_cmd, "--n 3 --help --bogus", &o), QX_EXIT_OK);
        QT_EQ_INT(parse(&t_cmd, "-h", &o), QX_EXIT_OK);
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        close(fd);
    }
}

/* ---- the commands of the tool -------------------------------------------------------------- */

static const qx_opts_cmd* const g_cmds[] = {&qx_cmd_rotate_spec,    &qx_cmd_quantize_spec, &qx_cmd_eval_spec,     &qx_cmd_inspect_spec,
                                            &qx_cmd_plot_spec,      &qx_cmd_calibrate_spec, &qx_cmd_run_spec,     &qx_cmd_tokenize_spec,
                                            &qx_cmd_generate_spec,  &qx_cmd_demo_spec};
#define N_CMDS ((int)(sizeof g_cmds / sizeof g_cmds[0]))
static int g_have_bin;

/* Calls fn(cmd, use, entry) for every entry cmd accepts. */
static void each_option(const qx_opts_cmd* c, void (*fn)(const qx_opts_cmd*, const qx_opt*, void*), void* user) {
    const qx_opt_use* u;
    const qx_opt* p;
    for (u = c->uses; u < c->uses + QX_OPTS_MAX_USES && u->group; ++u)
        for (p = u->group->opts; p->kind != QX_OPT_END; ++p)
            if (qx_opts_takes(u, p)) fn(c, p, user);
}

typedef struct name_set {
    const char* names[256];
    int n, dup;
    char what[128];
} name_set;

static void add_name(name_set* s, const char* c, const char* name) {
    int i;
    for (i = 0; i < s->n; ++i)
        if (strcmp(s->names[i], name) == 0 && !s->dup) { s->dup = 1; snprintf(s->what, sizeof s->what, "%s %s", c, name); }
    if (s->n < 256) s->names[s->n++] = name;
}

static void collect(const qx_opts_cmd* c, const qx_opt* p, void* user) {
    name_set* s = (name_set*)user;
    add_name(s, c->name, p->name);
    if (p->alias) add_name(s, c->name, p->alias);
    QT_CHECKF(p->name[0] == '-' && (!p->alias || p->alias[0] == '-'), "%s: %s", c->name, p->name);
    QT_CHECKF(p->kind != QX_OPT_CHOICE || (p->choices && p->choices[0].word), "%s %s: a choice without words", c->name, p->name);
    QT_CHECKF(p->kind != QX_OPT_CUSTOM || p->fn, "%s %s: a callback entry without callback", c->name, p->name);
    QT_CHECKF(p->help && p->help[0], "%s %s: no help text", c->name, p->name);
}

/* Every command's tables: names start with '-', each is accepted once, entries are complete, and
   the tool's command list (quarot --help) is the list of specs. */
static void test_command_tables(void) {
    int i, n_listed = 0;
    const char* p;
    for (i = 0; i < N_CMDS; ++i) {
        name_set s;
        memset(&s, 0, sizeof s);
        each_option(g_cmds[i], collect, &s);
        QT_CHECKF(!s.dup, "accepted twice: %s", s.what);
        QT_CHECKF(s.n > 0, "%s accepts no option", g_cmds[i]->name);
    }
    if (!g_have_bin) { QT_SKIP("no quarot binary"); return; }
    QT_EQ_INT(CLI("--help"), 0);
    p = strstr(g_out, "\ncommands:\n");
    QT_CHECK(p != NULL);
    for (p = p ? p + 11 : g_out + strlen(g_out); strncmp(p, "  ", 2) == 0; p = strchr(p, '\n') + 1) {
        char name[32];
        int found = 0;
        if (sscanf(p, " %31s", name) != 1) break;
        for (i = 0; i < N_CMDS; ++i) found |= strcmp(g_cmds[i]->name, name) == 0;
        QT_CHECKF(found, "quarot --help lists '%s', which has no option spec here", name);
        ++n_listed;
        if (!strchr(p, '\n')) break;
    }
    QT_EQ_INT(n_listed, N_CMDS);
}

/* the help line of an entry, "\n  -o, --output" / "\n  --w-asym, --asym" / "\n  --seed", in the tool's help */
static void listed(const qx_opts_cmd* c, const qx_opt* p, void* user) {
    char want[128];
    const char* at;
    (void)user;
    if (!p->alias) snprintf(want, sizeof want, "\n  %s", p->name);
    else if (p->alias[1] != '-') snprintf(want, sizeof want, "\n  %s, %s", p->alias, p->name);
    else snprintf(want, sizeof want, "\n  %s, %s", p->name, p->alias);
    for (at = strstr(g_out, want); at && at[strlen(want)] != ' ' && at[strlen(want)] != '\n'; at = strstr(at + 1, want)) {}
    QT_CHECKF(at != NULL, "quarot %s --help does not list '%s'", c->name, want + 3);
}

/* the tool takes the option: a valued one without its value is that usage error; a flag is passed
   over to the next word (here an unknown option) */
static void wired(const qx_opts_cmd* c, const qx_opt* p, void* user) {
    char want[256];
    const char* names[2];
    int k;
    (void)user;
    names[0] = p->name;
    names[1] = p->alias;
    for (k = 0; k < 2 && names[k]; ++k) {
        if (p->kind == QX_OPT_FLAG || p->kind == QX_OPT_FLAG_OFF) {
            QT_EQ_INT(CLI("%s %s --zz-not-an-option", c->name, names[k]), 1);
            snprintf(want, sizeof want, "quarot %s: unknown %s '--zz-not-an-option' (see quarot %s --help)\n", c->name,
                     c->operands[0].name ? "option" : "argument", c->name);
        } else {
            QT_EQ_INT(CLI("%s %s", c->name, names[k]), 1);
            snprintf(want, sizeof want, "quarot %s: option %s needs a value (see quarot %s --help)\n", c->name, names[k], c->name);
        }
        QT_CHECKF(strcmp(g_err, want) == 0, "quarot %s %s: %s", c->name, names[k], g_err);
    }
}

static void test_command_help(void) {
    int i;
    if (!g_have_bin) { QT_SKIP("no quarot binary"); return; }
    for (i = 0; i < N_CMDS; ++i) {
        char usage[64];
        QT_EQ_INT(CLI("%s --help", g_cmds[i]->name), 0);
        snprintf(usage, sizeof usage, "usage: quarot %s ", g_cmds[i]->name);
        QT_CHECKF(strncmp(g_out, usage, strlen(usage)) == 0 && g_err[0] == '\0', "quarot %s --help: %.80s", g_cmds[i]->name, g_out);
        each_option(g_cmds[i], listed, NULL);
        QT_CHECKF(strstr(g_out, "\n  -h, --help ") != NULL, "quarot %s --help does not list -h, --help", g_cmds[i]->name);
    }
}

static void test_command_options(void) {
    int i;
    if (!g_have_bin) { QT_SKIP("no quarot binary"); return; }
    for (i = 0; i < N_CMDS; ++i) each_option(g_cmds[i], wired, NULL);
}

int main(int argc, char** argv) {
    (void)argc;
    QT_RUN(test_flags_and_values);
    QT_RUN(test_ranges);
    QT_RUN(test_choices_and_missing);
    QT_RUN(test_operands);
    QT_RUN(test_help);
    g_have_bin = cu_start(argv[0], "test_opts");
    QT_RUN(test_command_tables);
    QT_RUN(test_command_help);
    QT_RUN(test_command_options);
    if (g_have_bin) cu_finish();
    return qt_finish("test_opts");
}
