/* Per-thread, grow-only kernel scratch (see hk_ws.h). */
#include "hk_ws.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct Ws {
    void *p[HK_WS_COUNT];
    size_t n[HK_WS_COUNT];
} Ws;

static _Thread_local Ws *tls_ws;
static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;

static void ws_free(void *v) {
    Ws *w = v;
    for (int i = 0; i < HK_WS_COUNT; i++) free(w->p[i]);
    free(w);
}

static void ws_init(void) { pthread_key_create(&ws_key, ws_free); }

void *hk_ws(int slot, size_t bytes) {
    if (slot < 0 || slot >= HK_WS_COUNT) return NULL;
    Ws *w = tls_ws;
    if (!w) {
        pthread_once(&ws_once, ws_init);
        if (!(w = calloc(1, sizeof *w))) return NULL;
        tls_ws = w;
        /* the key frees it at thread exit; it also keeps it reachable */
        pthread_setspecific(ws_key, w);
    }
    if (bytes == 0) bytes = 1;
    if (w->n[slot] < bytes) {
        /* grow with headroom so a slowly growing size does not realloc each call */
        size_t want = bytes + bytes / 4;
        void *p = malloc(want);
        if (!p) return NULL;
        free(w->p[slot]);
        w->p[slot] = p;
        w->n[slot] = want;
    }
    return w->p[slot];
}

void *hk_ws_zero(int slot, size_t bytes) {
    void *p = hk_ws(slot, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}
