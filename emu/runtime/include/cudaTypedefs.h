// The emulated driver API's function-pointer types, as CUDA's cudaTypedefs.h names them: what
// cudaGetDriverEntryPointByVersion hands out is cast to these (core/cuda/cuda_backing.cpp).
#pragma once

#include <cuda.h>

using PFN_cuGetErrorString_v6000 = decltype(&cuGetErrorString);
using PFN_cuDeviceGet_v2000 = decltype(&cuDeviceGet);
using PFN_cuDeviceGetAttribute_v2000 = decltype(&cuDeviceGetAttribute);
using PFN_cuMemGetAllocationGranularity_v10020 = decltype(&cuMemGetAllocationGranularity);
using PFN_cuMemAddressReserve_v10020 = decltype(&cuMemAddressReserve);
using PFN_cuMemAddressFree_v10020 = decltype(&cuMemAddressFree);
using PFN_cuMemCreate_v10020 = decltype(&cuMemCreate);
using PFN_cuMemRelease_v10020 = decltype(&cuMemRelease);
using PFN_cuMemMap_v10020 = decltype(&cuMemMap);
using PFN_cuMemUnmap_v10020 = decltype(&cuMemUnmap);
using PFN_cuMemSetAccess_v10020 = decltype(&cuMemSetAccess);
