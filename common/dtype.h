// Element types and reduction operations the engine knows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cerar {

enum class DType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };
enum class ReduceOp : uint8_t { kSum, kMin, kMax };

// Bytes per element.
size_t dtypeSize(DType dtype);
// "f32", "f64", "f16", "bf16", "i32", "i64", "u8".
const char* dtypeName(DType dtype);
// Parses the names above (and "float32", "float64", ...); throws Error on anything else.
DType parseDType(const std::string& name);
const char* reduceOpName(ReduceOp op);
// True for f32 and f64, the types CERAR's linear codec supports.
bool isCerarDType(DType dtype);
// True for f16 and bf16 (the int8 wire carries them over a float32 copy).
bool isSixteenBitFloat(DType dtype);

}  // namespace cerar
