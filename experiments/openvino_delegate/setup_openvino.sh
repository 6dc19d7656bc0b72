#!/bin/bash
# OpenVINO for ExecuTorch's OpenVINO delegate, beside the dev venv (not in it: openvino 2025.x declares numpy<2.3,
# the venv pins 2.4; it runs with 2.4 here). Usage: setup_openvino.sh DIR [PRECISION]   (PRECISION f32 or bf16)
#   DIR/py         PYTHONPATH for the export (openvino's Python frontend, nncf, which executorch's package imports)
#   DIR/libs_tN    OPENVINO_LIB_PATH=DIR/libs_tN/libopenvino_c.so.2541 for N = 1, 2 inference threads
set -euo pipefail
dir=$1; precision=${2:-f32}
pip=${VENV:-$HOME/.cache/omni_vla/venv}/bin/pip
"$pip" install -q --no-deps --target "$dir/py" openvino==2025.4.1 nncf==3.1.0 psutil pytorch-tokenizers
for n in 1 2; do
  rm -rf "$dir/libs_t$n"
  cp -a "$dir/py/openvino/libs" "$dir/libs_t$n"
  # ExecuTorch's backend imports the compiled blob with no properties: the CPU plugin's defaults would apply
  # (bf16 on a CPU with AMX / AVX512-BF16, every core). OpenVINO reads plugin defaults from plugins.xml beside it.
  cat > "$dir/libs_t$n/plugins.xml" <<XML
<ie>
    <plugins>
        <plugin name="CPU" location="libopenvino_intel_cpu_plugin.so">
            <properties>
                <property key="INFERENCE_PRECISION_HINT" value="$precision"/>
                <property key="INFERENCE_NUM_THREADS" value="$n"/>
            </properties>
        </plugin>
    </plugins>
</ie>
XML
done
