module @layer_norm_kernel {
  tt.func public @layer_norm_kernel(%arg0: !tt.ptr<f32> {tt.divisibility = 32 : i32}, %arg1: !tt.ptr<f32> {tt.divisibility = 32 : i32}, %arg2: !tt.ptr<f32> {tt.divisibility = 32 : i32}, %arg3: !tt.ptr<f32> {tt.divisibility = 32 : i32}) {
    %0 = tt.get_program_id x : i32
    %c0_i32 = arith.constant 0 : i32
    %c32_i32 = arith.constant 32 : i32
    %1 = arith.muli %0, %c32_i32 : i32
    %c512_i32 = arith.constant 512 : i32
    %2 = arith.muli %c0_i32, %c512_i32 : i32
    %c0_i32_0 = arith.constant 0 : i32
    %c0_i32_1 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %3 = arith.muli %c0_i32_0, %c1_i32 : i32
    %c512_i32_2 = arith.constant 512 : i32
    %4 = arith.muli %c0_i32_1, %c512_i32_2 : i32
    %c0_i32_3 = arith.constant 0 : i32
    %c0_i32_4 = arith.constant 0 : i32
    %c1_i32_5 = arith.constant 1 : i32
    %5 = arith.muli %c0_i32_3, %c1_i32_5 : i32
    %c512_i32_6 = arith.constant 512 : i32
    %6 = arith.muli %c0_i32_4, %c512_i32_6 : i32
    %c0_i32_7 = arith.constant 0 : i32
    %c32_i32_8 = arith.constant 32 : i32
    %7 = arith.muli %0, %c32_i32_8 : i32
    %c512_i32_9 = arith.constant 512 : i32
    %8 = arith.muli %c0_i32_7, %c512_i32_9 : i32
    %c0_i32_10 = arith.constant 0 : i32
    %9 = tt.splat %c0_i32_10 : i32 -> tensor<32x512xi32>
    %10 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %11 = tt.expand_dims %10 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %12 = tt.broadcast %11 : tensor<32x1xi32> -> tensor<32x512xi32>
    %13 = tt.splat %1 : i32 -> tensor<32x512xi32>
    %14 = arith.addi %12, %13 : tensor<32x512xi32>
    %c512_i32_11 = arith.constant 512 : i32
    %15 = tt.splat %c512_i32_11 : i32 -> tensor<32x512xi32>
    %16 = arith.muli %14, %15 : tensor<32x512xi32>
    %17 = arith.addi %9, %16 : tensor<32x512xi32>
    %18 = tt.make_range {end = 512 : i32, start = 0 : i32} : tensor<512xi32>
    %19 = tt.expand_dims %18 {axis = 0 : i32} : tensor<512xi32> -> tensor<1x512xi32>
    %20 = tt.broadcast %19 : tensor<1x512xi32> -> tensor<32x512xi32>
    %21 = tt.splat %2 : i32 -> tensor<32x512xi32>
    %22 = arith.addi %20, %21 : tensor<32x512xi32>
    %c1_i32_12 = arith.constant 1 : i32
    %23 = tt.splat %c1_i32_12 : i32 -> tensor<32x512xi32>
    %24 = arith.muli %22, %23 : tensor<32x512xi32>
    %25 = arith.addi %17, %24 : tensor<32x512xi32>
    %26 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<32x512x!tt.ptr<f32>>
    %27 = tt.addptr %26, %25 : tensor<32x512x!tt.ptr<f32>>, tensor<32x512xi32>
    %28 = tt.load %27 : tensor<32x512x!tt.ptr<f32>>
    %29 = "tt.reduce"(%28) <{axis = 1 : i32}> ({
    ^bb0(%arg4: f32, %arg5: f32):
      %109 = arith.addf %arg4, %arg5 : f32
      tt.reduce.return %109 : f32
    }) : (tensor<32x512xf32>) -> tensor<32xf32>
    %30 = tt.expand_dims %29 {axis = 1 : i32} : tensor<32xf32> -> tensor<32x1xf32>
    %cst = arith.constant 5.120000e+02 : f32
    %31 = tt.splat %cst : f32 -> tensor<32x1xf32>
    %32 = arith.divf %30, %31 : tensor<32x1xf32>
    %33 = tt.broadcast %32 : tensor<32x1xf32> -> tensor<32x512xf32>
    %34 = arith.subf %28, %33 : tensor<32x512xf32>
    %35 = arith.mulf %34, %34 : tensor<32x512xf32>
    %36 = "tt.reduce"(%35) <{axis = 1 : i32}> ({
    ^bb0(%arg4: f32, %arg5: f32):
      %109 = arith.addf %arg4, %arg5 : f32
      tt.reduce.return %109 : f32
    }) : (tensor<32x512xf32>) -> tensor<32xf32>
    %37 = tt.expand_dims %36 {axis = 1 : i32} : tensor<32xf32> -> tensor<32x1xf32>
    %cst_13 = arith.constant 5.120000e+02 : f32
    %38 = tt.splat %cst_13 : f32 -> tensor<32x1xf32>
    %39 = arith.divf %37, %38 : tensor<32x1xf32>
    %40 = tt.broadcast %32 : tensor<32x1xf32> -> tensor<32x512xf32>
    %41 = arith.subf %28, %40 : tensor<32x512xf32>
    %cst_14 = arith.constant 9.99999974E-6 : f32
    %42 = tt.splat %cst_14 : f32 -> tensor<32x1xf32>
    %43 = arith.addf %39, %42 : tensor<32x1xf32>
    %44 = tt.extern_elementwise %43 {libname = "", libpath = "", pure = true, symbol = "__nv_rsqrtf"} : (tensor<32x1xf32>) -> tensor<32x1xf32>
    %45 = tt.broadcast %44 : tensor<32x1xf32> -> tensor<32x512xf32>
    %46 = arith.mulf %41, %45 : tensor<32x512xf32>
    %c0_i32_15 = arith.constant 0 : i32
    %47 = tt.splat %c0_i32_15 : i32 -> tensor<1x512xi32>
    %48 = tt.make_range {end = 1 : i32, start = 0 : i32} : tensor<1xi32>
    %49 = tt.expand_dims %48 {axis = 1 : i32} : tensor<1xi32> -> tensor<1x1xi32>
    %50 = tt.broadcast %49 : tensor<1x1xi32> -> tensor<1x512xi32>
    %51 = tt.splat %3 : i32 -> tensor<1x512xi32>
    %52 = arith.addi %50, %51 : tensor<1x512xi32>
    %c512_i32_16 = arith.constant 512 : i32
    %53 = tt.splat %c512_i32_16 : i32 -> tensor<1x512xi32>
    %54 = arith.muli %52, %53 : tensor<1x512xi32>
    %55 = arith.addi %47, %54 : tensor<1x512xi32>
    %56 = tt.make_range {end = 512 : i32, start = 0 : i32} : tensor<512xi32>
    %57 = tt.expand_dims %56 {axis = 0 : i32} : tensor<512xi32> -> tensor<1x512xi32>
    %58 = tt.splat %4 : i32 -> tensor<1x512xi32>
    %59 = arith.addi %57, %58 : tensor<1x512xi32>
    %c1_i32_17 = arith.constant 1 : i32
    %60 = tt.splat %c1_i32_17 : i32 -> tensor<1x512xi32>
    %61 = arith.muli %59, %60 : tensor<1x512xi32>
    %62 = arith.addi %55, %61 : tensor<1x512xi32>
    %63 = tt.splat %arg1 : !tt.ptr<f32> -> tensor<1x512x!tt.ptr<f32>>
    %64 = tt.addptr %63, %62 : tensor<1x512x!tt.ptr<f32>>, tensor<1x512xi32>
    %65 = tt.load %64 : tensor<1x512x!tt.ptr<f32>>
    %66 = tt.broadcast %65 : tensor<1x512xf32> -> tensor<32x512xf32>
    %67 = arith.mulf %46, %66 : tensor<32x512xf32>
    %c0_i32_18 = arith.constant 0 : i32
    %68 = tt.splat %c0_i32_18 : i32 -> tensor<1x512xi32>
    %69 = tt.make_range {end = 1 : i32, start = 0 : i32} : tensor<1xi32>
    %70 = tt.expand_dims %69 {axis = 1 : i32} : tensor<1xi32> -> tensor<1x1xi32>
    %71 = tt.broadcast %70 : tensor<1x1xi32> -> tensor<1x512xi32>
    %72 = tt.splat %5 : i32 -> tensor<1x512xi32>
    %73 = arith.addi %71, %72 : tensor<1x512xi32>
    %c512_i32_19 = arith.constant 512 : i32
    %74 = tt.splat %c512_i32_19 : i32 -> tensor<1x512xi32>
    %75 = arith.muli %73, %74 : tensor<1x512xi32>
    %76 = arith.addi %68, %75 : tensor<1x512xi32>
    %77 = tt.make_range {end = 512 : i32, start = 0 : i32} : tensor<512xi32>
    %78 = tt.expand_dims %77 {axis = 0 : i32} : tensor<512xi32> -> tensor<1x512xi32>
    %79 = tt.splat %6 : i32 -> tensor<1x512xi32>
    %80 = arith.addi %78, %79 : tensor<1x512xi32>
    %c1_i32_20 = arith.constant 1 : i32
    %81 = tt.splat %c1_i32_20 : i32 -> tensor<1x512xi32>
    %82 = arith.muli %80, %81 : tensor<1x512xi32>
    %83 = arith.addi %76, %82 : tensor<1x512xi32>
    %84 = tt.splat %arg2 : !tt.ptr<f32> -> tensor<1x512x!tt.ptr<f32>>
    %85 = tt.addptr %84, %83 : tensor<1x512x!tt.ptr<f32>>, tensor<1x512xi32>
    %86 = tt.load %85 : tensor<1x512x!tt.ptr<f32>>
    %87 = tt.broadcast %86 : tensor<1x512xf32> -> tensor<32x512xf32>
    %88 = arith.addf %67, %87 : tensor<32x512xf32>
    %c0_i32_21 = arith.constant 0 : i32
    %89 = tt.splat %c0_i32_21 : i32 -> tensor<32x512xi32>
    %90 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %91 = tt.expand_dims %90 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %92 = tt.broadcast %91 : tensor<32x1xi32> -> tensor<32x512xi32>
    %93 = tt.splat %7 : i32 -> tensor<32x512xi32>
    %94 = arith.addi %92, %93 : tensor<32x512xi32>
    %c512_i32_22 = arith.constant 512 : i32
    %95 = tt.splat %c512_i32_22 : i32 -> tensor<32x512xi32>
    %96 = arith.muli %94, %95 : tensor<32x512xi32>
    %97 = arith.addi %89, %96 : tensor<32x512xi32>
    %98 = tt.make_range {end = 512 : i32, start = 0 : i32} : tensor<512xi32>
    %99 = tt.expand_dims %98 {axis = 0 : i32} : tensor<512xi32> -> tensor<1x512xi32>
    %100 = tt.broadcast %99 : tensor<1x512xi32> -> tensor<32x512xi32>
    %101 = tt.splat %8 : i32 -> tensor<32x512xi32>
    %102 = arith.addi %100, %101 : tensor<32x512xi32>
    %c1_i32_23 = arith.constant 1 : i32
    %103 = tt.splat %c1_i32_23 : i32 -> tensor<32x512xi32>
    %104 = arith.muli %102, %103 : tensor<32x512xi32>
    %105 = arith.addi %97, %104 : tensor<32x512xi32>
    %106 = tt.splat %arg3 : !tt.ptr<f32> -> tensor<32x512x!tt.ptr<f32>>
    %107 = tt.addptr %106, %105 : tensor<32x512x!tt.ptr<f32>>, tensor<32x512xi32>
    %108 = tt.load %107 : tensor<32x512x!tt.ptr<f32>>
    tt.store %107, %88 : tensor<32x512x!tt.ptr<f32>>
    tt.return
  }
}
