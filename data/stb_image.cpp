// stb_image's implementation (Debian's libstb-dev, used header-only), compiled once, for the three
// formats an image folder may hold; data/image_folder.cpp is its only caller.
// Not here: anything of frugal's. This file is third-party code, built with its own flags (see
// data/CMakeLists.txt): the sanitizers still check its memory accesses, but not the harmless
// undefined behaviour it is known for.

// Only the formats ImageFolder accepts: every other decoder is code a corrupt file could reach.
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO  // frugal reads the files itself and decodes from memory
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
