/* The planner table (planners.h) from planners.def. */
#include "planners.h"

#include <string.h>

const PlannerDef planner_table[] = {
#define PLANNER_ORACLE(name, entry, desc) {name, desc, entry, NULL},
#define PLANNER_LAYERS(name, entry, desc) {name, desc, NULL, entry},
#include "planners.def"
#undef PLANNER_ORACLE
#undef PLANNER_LAYERS
    {NULL, NULL, NULL, NULL}};

/* The planners alt_plan_run runs (the PLANNER_LAYERS rows), in table
 * order: the list tests/planner_alt iterates. */
const char *const alt_planner_names[] = {
#define PLANNER_ORACLE(name, entry, desc)
#define PLANNER_LAYERS(name, entry, desc) name,
#include "planners.def"
#undef PLANNER_ORACLE
#undef PLANNER_LAYERS
    NULL};

const PlannerDef *planner_find(const char *name)
{
    for (const PlannerDef *p = planner_table; name && p->name; p++)
        if (!strcmp(p->name, name))
            return p;
    return NULL;
}

void planner_names(char *buf, size_t n)
{
    size_t used = 0;
    if (n)
        buf[0] = '\0';
    for (const PlannerDef *p = planner_table; p->name && used < n; p++) {
        int w = snprintf(buf + used, n - used, "%s%s", p == planner_table ? "" : ", ", p->name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

void planner_help(FILE *f, const char *indent)
{
    for (const PlannerDef *p = planner_table; p->name; p++)
        fprintf(f, "%s%-14s %s%s\n", indent, p->name, p->desc,
                p == planner_table ? " (default)" : "");
}
