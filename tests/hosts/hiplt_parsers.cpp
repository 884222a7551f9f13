/* The real hipBLASLt's own readers, called on what tunedblas writes (conformance suite,
 * tests/conformance/amd.rs), in a root holding Debian's libhipblaslt1 7.1.1. No GPU is
 * needed: none of these touches the device.
 *
 *   hiplt_parsers revision
 *       hipblasLtGetGitRevision and hipblasLtGetVersion (they only check that the handle is
 *       not NULL): what a tuning file's `Git Version:` line must hold.
 *   hiplt_parsers types NAME...  /  computes NAME...
 *       The library's string_to_hip_datatype / string_to_hipblas_computetype (exported), the
 *       functions its override-file parser maps the type columns with.
 *   hiplt_parsers rows OFFSET FILE
 *       problemFromEntries, the override-file parser's row reader (not exported): found at
 *       OFFSET from the library's load address, after checking that its first bytes are the
 *       ones this build has there. Each value line of FILE (not a header, not the Git
 *       Version line) is split on commas, as the library splits it, and what the parser
 *       makes of it printed; the library returns index -1 for a row it refuses.
 * Each answer is one line on stdout. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

/* Declared as hipblaslt's client headers declare them (return types are not mangled). */
int string_to_hip_datatype(const std::string &value);
int string_to_hipblas_computetype(const std::string &value);
extern "C" int hipblasLtGetGitRevision(void *handle, char *rev);
extern "C" int hipblasLtGetVersion(void *handle, int *version);

/* std::pair<TensileLite::ProblemOverride, int> as hipBLASLt 7.1.1 lays it out. */
struct Row {
    bool trans_a, trans_b;
    int type_a, type_b, compute, out;
    size_t m, n, k, batch;
    int index;
};
static_assert(sizeof(Row) == 64, "the pair is 64 bytes");

typedef Row (*ProblemFromEntries)(const std::vector<std::string> &);

/* The first bytes of problemFromEntries in Debian's libhipblaslt.so.1.1 (7.1.1+dfsg-4):
 * its prologue and the check that a row has 11 entries (0x160 bytes of strings). */
static const unsigned char PROLOGUE[] = {
    0x55, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55, 0x41, 0x54, 0x53, 0x48, 0x83,
    0xec, 0x48, 0x48, 0x89, 0xfb, 0x48, 0x8b, 0x06, 0x48, 0x8b, 0x4e, 0x08,
    0x48, 0x29, 0xc1, 0x48, 0x81, 0xf9, 0x60, 0x01, 0x00, 0x00};

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    std::string cmd = argv[1];
    if (cmd == "revision") {
        char rev[256] = {0};
        int version = 0;
        void *placeholder = (void *)1;
        int st = hipblasLtGetGitRevision(placeholder, rev);
        int sv = hipblasLtGetVersion(placeholder, &version);
        printf("revision status=%d version_status=%d version=%d rev=[%s]\n", st, sv, version, rev);
        return 0;
    }
    if (cmd == "types" || cmd == "computes") {
        for (int i = 2; i < argc; i++) {
            int v = cmd == "types" ? string_to_hip_datatype(argv[i])
                                   : string_to_hipblas_computetype(argv[i]);
            printf("%s %s=%d\n", cmd.c_str(), argv[i], v);
        }
        return 0;
    }
    if (cmd == "rows" && argc == 4) {
        Dl_info info;
        if (!dladdr((void *)&hipblasLtGetVersion, &info) || !info.dli_fbase) {
            printf("rows: no load address\n");
            return 1;
        }
        unsigned long offset = strtoul(argv[2], nullptr, 0);
        const unsigned char *fn = (const unsigned char *)info.dli_fbase + offset;
        if (memcmp(fn, PROLOGUE, sizeof PROLOGUE) != 0) {
            printf("rows: not this build (other bytes at %#lx)\n", offset);
            return 3;
        }
        ProblemFromEntries parse = (ProblemFromEntries)fn;
        std::ifstream file(argv[3]);
        std::string line;
        int n = 0;
        while (std::getline(file, line)) {
            n++;
            if (line.find(',') == std::string::npos || line.find("transA") != std::string::npos)
                continue;
            std::vector<std::string> entries;
            std::stringstream ss(line);
            std::string entry;
            while (std::getline(ss, entry, ',')) entries.push_back(entry);
            Row r = parse(entries);
            printf("row line=%d index=%d trans=%d,%d m=%zu n=%zu k=%zu batch=%zu types=%d,%d,%d compute=%d\n",
                   n, r.index, r.trans_a, r.trans_b, r.m, r.n, r.k, r.batch, r.type_a, r.type_b,
                   r.out, r.compute);
        }
        return 0;
    }
    return 2;
}
