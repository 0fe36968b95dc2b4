/* libtrainscape as one translation unit (TS_UNITY_BUILD): the model's small functions are
 * static and inline across files, as in the Python extension, whose cffi source includes the
 * same files in the same order (src/trainscape/_native_build.py SOURCES;
 * tests/test_embed.py checks the two lists agree). Built by CMakeLists.txt. */
#define TS_UNITY_BUILD 1
#include "trainscape.h"
#include "network.c"
#include "collectives.c"
#include "pipeline.c"
#include "llm.c"
#include "batch.c"
#include "sweep.c"
#include "best.c"
#include "blocks_file.c"
