module @softmax_kernel attributes {stable_mosaic.version = N : i64} {
  func.func @softmax_kernel(%arg0: i32, %arg1: memref<32x512xf32, #tpu.memory_space<vmem>>, %arg2: memref<32x512xf32, #tpu.memory_space<vmem>>) attributes {dimension_semantics = [#tpu.dimension_semantics<parallel>], iteration_bounds = array<i64: 8>, scalar_prefetch = 0 : i64, scratch_operands = 0 : i64, tpu.core_type = #tpu.core_type<tc>, window_params = [{transform_indices = @transform_0, window_bounds = array<i64: 32, 512>}, {transform_indices = @transform_1, window_bounds = array<i64: 32, 512>}]} {
    %c0 = arith.constant 0 : index
    %c0_0 = arith.constant 0 : index
    %0 = vector.load %arg1[%c0, %c0_0] : memref<32x512xf32, #tpu.memory_space<vmem>>, vector<32x512xf32>
    %1 = vector.shape_cast %0 : vector<32x512xf32> to vector<32x512xf32>
    %cst = arith.constant dense<0xFF800000> : vector<32xf32>
    %2 = vector.multi_reduction <maximumf>, %1, %cst [1] : vector<32x512xf32> to vector<32xf32>
    %3 = vector.shape_cast %2 : vector<32xf32> to vector<32x1xf32>
    %4 = vector.broadcast %3 : vector<32x1xf32> to vector<32x512xf32>
    %5 = arith.subf %1, %4 : vector<32x512xf32>
    %6 = math.exp %5 : vector<32x512xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : vector<32xf32>
    %7 = vector.multi_reduction <add>, %6, %cst_1 [1] : vector<32x512xf32> to vector<32xf32>
    %8 = vector.shape_cast %7 : vector<32xf32> to vector<32x1xf32>
    %9 = vector.broadcast %8 : vector<32x1xf32> to vector<32x512xf32>
    %10 = arith.divf %6, %9 : vector<32x512xf32>
    %c0_2 = arith.constant 0 : index
    %c0_3 = arith.constant 0 : index
    %11 = vector.load %arg2[%c0_2, %c0_3] : memref<32x512xf32, #tpu.memory_space<vmem>>, vector<32x512xf32>
    tpu.vector_store %arg2[%c0_2, %c0_3], %10 {strides = array<i32>} : memref<32x512xf32, #tpu.memory_space<vmem>>, vector<32x512xf32>,
    return
  }
  func.func @transform_0(%arg0: i32) -> (i32, i32) {
    %c0_i32 = arith.constant 0 : i32
    %c0_i32_0 = arith.constant 0 : i32
    return %arg0, %c0_i32 : i32, i32
  }
  func.func @transform_1(%arg0: i32) -> (i32, i32) {
    %c0_i32 = arith.constant 0 : i32
    %c0_i32_0 = arith.constant 0 : i32
    return %arg0, %c0_i32 : i32, i32
  }
}
