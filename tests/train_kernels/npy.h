/* Minimal .npy reader/writer for the training-kernel test driver: version
 * 1.0 (2.0/3.0 read), C order, little-endian <f4 <f8 <i4 <i8 <u2. */
#ifndef HETC_TEST_NPY_H
#define HETC_TEST_NPY_H

#include <stdint.h>

#define NPY_MAX_RANK 8

typedef enum NpyType { NPY_F4, NPY_F8, NPY_I4, NPY_I8, NPY_U2 } NpyType;

typedef struct Npy {
    NpyType type;
    int rank;
    int64_t dims[NPY_MAX_RANK];
    int64_t numel;
    void *data;
} Npy;

/* 0 on success; on failure -1 and a message in err (256 bytes). */
int npy_read(const char *path, Npy *out, char *err);
int npy_write(const char *path, NpyType type, int rank, const int64_t *dims, const void *data,
              char *err);
void npy_free(Npy *a);
int npy_type_size(NpyType t);

#endif
