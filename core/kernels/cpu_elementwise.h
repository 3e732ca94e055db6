// Internal to the CPU element-wise kernels and their tests: the generic strided
// loops (the reference: every element through double, the op chosen per element)
// and the fast path the registered kernels try first, which gives the same bits
// (NaN payloads aside, which IEEE 754 leaves open) on the layouts it takes.
#pragma once

#include "core/kernel_table.h"

namespace ember::kernels::cpu {

// The generic loops: any layout, any dtype the family allows.
void unary_generic(const UnaryArgs& a);
void unary_backward_generic(const UnaryBackwardArgs& a);
void binary_generic(const BinaryArgs& a);
void binary_mixed_generic(const BinaryArgs& a);  // x_bf16 or y_bf16 set
void binary_backward_generic(const BinaryBackwardArgs& a);
void cast_generic(const CastArgs& a);
void fill_generic(const FillArgs& a);
void where_generic(const WhereArgs& a);

// The fast path: one tight loop per (op, dtype), the op chosen once per call, for
// float32, float64, bfloat16 and int64 operands laid out as it can take: all
// contiguous over the iteration (any storage offset), or rows: an innermost dim
// of at least 16 elements that is contiguous in every operand, the outer dims
// strided or broadcast (x + bias, a column slice). Each input is the output
// itself (same layout: in place) or shares no byte with it. Each returns true
// when it wrote the output, false (having written nothing) to leave the call to
// the generic loop. cast and fill take contiguous operands only, except a cast to
// the same dtype (a copy: contiguous() of a view, copy_ into one) between layouts of
// the same shape, or a strided one and a contiguous one, sharing no byte: rows of the
// innermost dim, over the pool (its bits moved, exact at every thread count).
// Ops that are one correctly rounded IEEE operation (+ - * / sqrt) or exact
// (negation, selection, comparison) compute float32 and bfloat16 in float: the
// double result rounded to float is the float result, since double carries more
// than 2 * 24 + 2 bits (Figueroa, "When is double rounding innocuous?", 1995).
// Every other op computes in double, as the generic loop does.
bool unary_fast(const UnaryArgs& a);
bool unary_backward_fast(const UnaryBackwardArgs& a);
bool binary_fast(const BinaryArgs& a);
bool binary_backward_fast(const BinaryBackwardArgs& a);
bool cast_fast(const CastArgs& a);
bool fill_fast(const FillArgs& a);
// where: a contiguous output, the condition and both operands in any layout over
// the output's shape (strided, transposed, broadcast along any dim, a 0-dim value),
// none sharing a byte with the output; rows of the innermost dim over the pool,
// each element selected (its bits moved), so exact at every thread count.
bool where_fast(const WhereArgs& a);

// Float32 approximations the registered kernels try first when cpu::fast_paths()
// (cpu_parallel.h), ahead of the fast path: GELU (exact and tanh) forward and backward in
// float (core/kernels/cpu_float_math.cpp), contiguous operands, each input the
// output or disjoint from it; held to DESIGN.md's element-wise threshold (1e-6
// relative) against the generic loop, not to its bits. false: not taken.
bool unary_float_approx(const UnaryArgs& a);
bool unary_backward_float_approx(const UnaryBackwardArgs& a);

}  // namespace ember::kernels::cpu
