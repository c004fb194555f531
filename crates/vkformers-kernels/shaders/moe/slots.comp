#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// After the stable counting sort of the n·k assignments a = token·k + j by expert (perm [S]:
// the assignment at sorted slot s), the per-slot and per-assignment indices:
//   slot_token[s]  = perm[s] / k          (the token row the slot reads)
//   slot_expert[s] = ids[perm[s]]         (the expert whose weights the slot uses)
//   assign_slot[a] = s where perm[s] == a (the slot holding assignment a)
// S = n·k, all int32.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    I32In ids;
    I32In perm;
    I32Buf slot_token;
    I32Buf slot_expert;
    I32Buf assign_slot;
    uint slots;
    uint k;
} pc;

void main() {
    FOR_EACH_INDEX(s, pc.slots) {
        int a = pc.perm.v[s];
        pc.slot_token.v[s] = a / int(pc.k);
        pc.slot_expert.v[s] = pc.ids.v[a];
        pc.assign_slot.v[a] = int(s);
    }
}
