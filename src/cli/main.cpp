#include <cstdio>
int main() { std::puts("vrambench"); return 0; }
