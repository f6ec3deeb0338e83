"""The Mosaic GPU Memory section says why a block's shared memory exceeds its buffers' sum
(issue 39 item 5): 512 B + an 8 B barrier is 1,032 B, each array 1024-byte aligned."""

from helpers import workbench


def test_the_shared_memory_sum_says_its_alignment_padding():
    view = workbench("tma_blocks").memory()  # SMEM f32[128] (512 B) and one barrier (8 B)
    g = view.payload()["gpu"]
    assert [b["bytes"] for b in g["buffers"]] == [512, 8]
    assert g["gpus"][1]["shared_bytes"] == 1032  # h100
    why = ("shared memory per block 1,032 B, not the buffers' 520 B: Mosaic GPU starts each "
           "array at a 1,024-byte aligned offset and the barriers after the last array, aligned "
           "too (512 B of alignment padding)")
    assert g["note"].startswith(why)
    assert why in view.to_text() and why.replace("'", "&#x27;") in view.to_html()


def test_no_padding_note_where_the_sum_is_exact():
    g = workbench("gpu_mesh_kernel").memory().payload()["gpu"]
    assert g["note"].startswith("registers/thread:")
