/* frontend.h: internals shared by the frontend's files (scopes, node
 * builders with checks, PyTorch-style formatting). */
#ifndef KILN_FRONTEND_H
#define KILN_FRONTEND_H

#include "ir/graph.h"

/* Formats contiguous host data the way PyTorch prints a tensor:
 * "tensor([[1., 2.],\n        [3., 4.]])", "tensor(7)", "tensor([], size=(0, 3))",
 * dtype suffix ", dtype=kiln.int32" where PyTorch shows one, device suffix
 * ", device='cuda:0'" for non-CPU devices. Returns a malloc'd string. */
char *fe_format(const void *data, kiln_dtype dt, int ndim, const int64_t *shape, kiln_device dev);

#endif
