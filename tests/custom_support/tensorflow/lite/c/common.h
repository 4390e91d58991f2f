// Minimal stand-in for TFLite's C API (tensorflow/lite/core/c/common.h, re-exported by
// tensorflow/lite/c/common.h), written for the custom-op compile tests because TensorFlow's
// headers do not install from a package registry here.  Only what a custom op touches is
// declared, with the names and signatures of the real header: TfLiteStatus, TfLiteType values
// (c_api_types.h), TfLiteIntArray (+ Create/Free), TfLitePtrUnion, TfLiteTensor {type, data,
// dims, bytes}, TfLiteNode {inputs, outputs, user_data, custom_initial_data(_size)},
// TfLiteContext {tensors_size, tensors, ResizeTensor, ReportError}, TfLiteRegistration
// {init, free, prepare, invoke, ...} and the TF_LITE_* macros.  Field order is a subset of the
// real one; this is not ABI-compatible and is never linked against LiteRT.
#ifndef EDGECONV_TEST_TFLITE_COMMON_STANDIN_H_
#define EDGECONV_TEST_TFLITE_COMMON_STANDIN_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TfLiteStatus { kTfLiteOk = 0, kTfLiteError = 1 } TfLiteStatus;

typedef enum {
  kTfLiteNoType = 0, kTfLiteFloat32 = 1, kTfLiteInt32 = 2, kTfLiteUInt8 = 3, kTfLiteInt64 = 4,
  kTfLiteString = 5, kTfLiteBool = 6, kTfLiteInt16 = 7, kTfLiteComplex64 = 8, kTfLiteInt8 = 9,
  kTfLiteFloat16 = 10,
} TfLiteType;

typedef struct TfLiteIntArray {
  int size;
  int data[];
} TfLiteIntArray;

static inline TfLiteIntArray* TfLiteIntArrayCreate(int size) {
  TfLiteIntArray* a = (TfLiteIntArray*)malloc(sizeof(TfLiteIntArray) + sizeof(int) * (size_t)size);
  a->size = size;
  return a;
}

static inline void TfLiteIntArrayFree(TfLiteIntArray* a) { free(a); }

typedef union TfLitePtrUnion {
  int32_t* i32;
  int64_t* i64;
  float* f;
  char* raw;
  const char* raw_const;
  uint8_t* uint8;
  bool* b;
  int8_t* int8;
} TfLitePtrUnion;

typedef struct TfLiteTensor {
  TfLiteType type;
  TfLitePtrUnion data;
  TfLiteIntArray* dims;
  size_t bytes;
  const char* name;
} TfLiteTensor;

typedef struct TfLiteNode {
  TfLiteIntArray* inputs;
  TfLiteIntArray* outputs;
  TfLiteIntArray* intermediates;
  TfLiteIntArray* temporaries;
  void* user_data;
  void* builtin_data;
  const void* custom_initial_data;
  int custom_initial_data_size;
} TfLiteNode;

typedef struct TfLiteContext {
  size_t tensors_size;
  TfLiteTensor* tensors;
  TfLiteStatus (*ResizeTensor)(struct TfLiteContext*, TfLiteTensor* tensor, TfLiteIntArray* new_size);
  void (*ReportError)(struct TfLiteContext*, const char* msg, ...);
} TfLiteContext;

typedef struct TfLiteRegistration {
  void* (*init)(TfLiteContext* context, const char* buffer, size_t length);
  void (*free)(TfLiteContext* context, void* buffer);
  TfLiteStatus (*prepare)(TfLiteContext* context, TfLiteNode* node);
  TfLiteStatus (*invoke)(TfLiteContext* context, TfLiteNode* node);
  const char* (*profiling_string)(const TfLiteContext* context, const TfLiteNode* node);
  int32_t builtin_code;
  const char* custom_name;
  int version;
} TfLiteRegistration;

#define TF_LITE_KERNEL_LOG(context, ...)            \
  do {                                              \
    (context)->ReportError((context), __VA_ARGS__); \
  } while (false)

#define TF_LITE_ENSURE(context, a)                                                          \
  do {                                                                                      \
    if (!(a)) {                                                                             \
      TF_LITE_KERNEL_LOG((context), "%s:%d %s was not true.", __FILE__, __LINE__, #a);      \
      return kTfLiteError;                                                                  \
    }                                                                                       \
  } while (0)

#define TF_LITE_ENSURE_EQ(context, a, b)                                                              \
  do {                                                                                                \
    if ((a) != (b)) {                                                                                 \
      TF_LITE_KERNEL_LOG((context), "%s:%d %s != %s (%d != %d)", __FILE__, __LINE__, #a, #b, (a), (b)); \
      return kTfLiteError;                                                                            \
    }                                                                                                 \
  } while (0)

#define TF_LITE_ENSURE_STATUS(a) \
  do {                           \
    const TfLiteStatus s = (a);  \
    if (s != kTfLiteOk) {        \
      return s;                  \
    }                            \
  } while (0)

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // EDGECONV_TEST_TFLITE_COMMON_STANDIN_H_
