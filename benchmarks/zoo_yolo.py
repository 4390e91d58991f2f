"""YOLOv8 / YOLO11-style detectors in plain torch for benchmarks/real_zoo.py (ultralytics is not
installed offline; these follow its published block structure at the "n" scale, random init).

* ``yolov8_pose``: C2f backbone, SPPF, PAN neck, decoupled Detect head with DFL box decoding, and
  the Pose head's keypoint decoding through in-place slice assignment (``y[:, 2::3] = ...``), the
  form ultralytics uses outside its export mode: it traces to ScatterND.
* ``yolov8_seg``: the same trunk with the Segment head (mask coefficients + prototype masks).
* ``yolo11_det``: C3k2 blocks, C2PSA attention (multi-head over the flattened grid, depthwise
  positional conv) and the depthwise classification branch.

Each returns its raw head outputs (decoded boxes and scores, keypoints, masks); no NMS.
"""

from __future__ import annotations


def _blocks():
    """The building blocks (torch imported here only)."""
    import torch
    from torch import nn

    class Conv(nn.Module):
        def __init__(self, c1, c2, k=1, s=1, g=1):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, k, s, k // 2, groups=g, bias=False)
            self.bn = nn.BatchNorm2d(c2)
            self.act = nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, c1, c2, n=1, shortcut=True, inner=None):
            super().__init__()
            self.c = c2 // 2
            self.cv1 = Conv(c1, 2 * self.c, 1)
            self.cv2 = Conv((2 + n) * self.c, c2, 1)
            self.m = nn.ModuleList((inner or Bottleneck)(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class C3k(nn.Module):
        """YOLO11's inner CSP block (C3 with two bottlenecks)."""

        def __init__(self, c, shortcut=True):
            super().__init__()
            h = c // 2
            self.cv1, self.cv2, self.cv3 = Conv(c, h), Conv(c, h), Conv(2 * h, c)
            self.m = nn.Sequential(Bottleneck(h, shortcut), Bottleneck(h, shortcut))

        def forward(self, x):
            return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))

    class SPPF(nn.Module):
        def __init__(self, c1, c2):
            super().__init__()
            self.cv1, self.cv2 = Conv(c1, c1 // 2), Conv(c1 // 2 * 4, c2)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            y.extend(self.m(y[-1]) for _ in range(3))
            return self.cv2(torch.cat(y, 1))

    class PSABlock(nn.Module):
        """YOLO11's position-sensitive attention (Attention + FFN, residual)."""

        def __init__(self, c, heads):
            super().__init__()
            self.heads, self.hd = heads, c // heads
            self.kd = self.hd // 2
            self.scale = self.kd ** -0.5
            self.qkv = Conv(c, c + 2 * self.kd * heads)
            self.proj, self.pe = Conv(c, c), Conv(c, c, 3, g=c)
            self.ffn = nn.Sequential(Conv(c, 2 * c), Conv(2 * c, c))

        def attention(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(x).view(b, self.heads, 2 * self.kd + self.hd, h * w).split(
                [self.kd, self.kd, self.hd], dim=2)
            attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
            y = (v @ attn.transpose(-2, -1)).view(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
            return self.proj(y)

        def forward(self, x):
            x = x + self.attention(x)
            return x + self.ffn(x)

    class C2PSA(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c // 2
            self.cv1, self.cv2 = Conv(c, 2 * self.c), Conv(2 * self.c, c)
            self.m = PSABlock(self.c, max(1, self.c // 64))

        def forward(self, x):
            a, b = self.cv1(x).split((self.c, self.c), dim=1)
            return self.cv2(torch.cat((a, self.m(b)), 1))

    return torch, nn, Conv, C2f, C3k, SPPF, C2PSA


def _anchors(shapes, strides):
    """ultralytics' make_anchors: grid cell centres and their strides, [2, A] and [1, A]."""
    import torch

    points, stride_list = [], []
    for (h, w), s in zip(shapes, strides):
        sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_list.append(torch.full((h * w, 1), float(s)))
    return torch.cat(points).T, torch.cat(stride_list).T


def build_yolo(kind: str, classes: int = 8, size: int = 128):
    """``kind``: ``v8_pose``, ``v8_seg`` or ``11_det``."""
    torch, nn, Conv, C2f, C3k, SPPF, C2PSA = _blocks()
    v11 = kind.startswith("11")

    def csp(c1, c2, n=1, shortcut=True):
        return C2f(c1, c2, n, shortcut, inner=C3k if v11 else None)

    widths = (16, 32, 64, 128, 256)
    reg_max, strides = 16, (8, 16, 32)

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            w = widths
            self.b1 = nn.Sequential(Conv(3, w[0], 3, 2), Conv(w[0], w[1], 3, 2), csp(w[1], w[1]),
                                    Conv(w[1], w[2], 3, 2), csp(w[2], w[2]))                    # P3
            self.b2 = nn.Sequential(Conv(w[2], w[3], 3, 2), csp(w[3], w[3]))                   # P4
            tail = [Conv(w[3], w[4], 3, 2), csp(w[4], w[4]), SPPF(w[4], w[4])]
            self.b3 = nn.Sequential(*(tail + [C2PSA(w[4])] if v11 else tail))                  # P5
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n1, self.n2 = csp(w[4] + w[3], w[3], shortcut=False), csp(w[3] + w[2], w[2], shortcut=False)
            self.d1, self.n3 = Conv(w[2], w[2], 3, 2), csp(w[2] + w[3], w[3], shortcut=False)
            self.d2, self.n4 = Conv(w[3], w[3], 3, 2), csp(w[3] + w[4], w[4], shortcut=False)
            chans = (w[2], w[3], w[4])
            c2, c3 = max(16, chans[0] // 4, 4 * reg_max), max(chans[0], min(classes, 100))

            def cls_branch(c):
                if v11:  # depthwise + pointwise pairs
                    return nn.Sequential(Conv(c, c, 3, g=c), Conv(c, c3), Conv(c3, c3, 3, g=c3), Conv(c3, c3),
                                         nn.Conv2d(c3, classes, 1))
                return nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, classes, 1))

            self.box = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
                                     for c in chans)
            self.cls = nn.ModuleList(cls_branch(c) for c in chans)
            self.dfl = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
            self.dfl.weight.data[:] = torch.arange(reg_max, dtype=torch.float).view(1, reg_max, 1, 1)
            grids = [(size // s, size // s) for s in strides]
            anchors, stride_t = _anchors(grids, strides)
            self.register_buffer("anchors", anchors)
            self.register_buffer("strides", stride_t)
            if kind == "v8_pose":
                self.nk = 17 * 3
                c4 = max(chans[0] // 4, self.nk)
                self.kpt = nn.ModuleList(nn.Sequential(Conv(c, c4, 3), Conv(c4, c4, 3), nn.Conv2d(c4, self.nk, 1))
                                         for c in chans)
            if kind == "v8_seg":
                c4, npr = max(chans[0] // 4, 32), 32
                self.mask = nn.ModuleList(nn.Sequential(Conv(c, c4, 3), Conv(c4, c4, 3), nn.Conv2d(c4, npr, 1))
                                          for c in chans)
                self.proto = nn.Sequential(Conv(chans[0], 64, 3), nn.ConvTranspose2d(64, 64, 2, 2, 0, bias=True),
                                           Conv(64, 64, 3), Conv(64, npr))

        def trunk(self, x):
            p3 = self.b1(x)
            p4 = self.b2(p3)
            p5 = self.b3(p4)
            h4 = self.n1(torch.cat((self.up(p5), p4), 1))
            o3 = self.n2(torch.cat((self.up(h4), p3), 1))
            o4 = self.n3(torch.cat((self.d1(o3), h4), 1))
            o5 = self.n4(torch.cat((self.d2(o4), p5), 1))
            return [o3, o4, o5]

        def detect(self, feats):
            b = feats[0].shape[0]
            box = torch.cat([m(f).view(b, 4 * reg_max, -1) for m, f in zip(self.box, feats)], 2)
            cls = torch.cat([m(f).view(b, classes, -1) for m, f in zip(self.cls, feats)], 2)
            a = box.shape[-1]
            dist = self.dfl(box.view(b, 4, reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
            lt, rb = dist.chunk(2, 1)
            x1y1, x2y2 = self.anchors.unsqueeze(0) - lt, self.anchors.unsqueeze(0) + rb
            xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
            return torch.cat((xywh, cls.sigmoid()), 1)

        def keypoints(self, feats):
            b = feats[0].shape[0]
            kpts = torch.cat([m(f).view(b, self.nk, -1) for m, f in zip(self.kpt, feats)], -1)
            y = kpts.clone()
            y[:, 2::3] = y[:, 2::3].sigmoid()
            y[:, 0::3] = (y[:, 0::3] * 2.0 + (self.anchors[0] - 0.5)) * self.strides
            y[:, 1::3] = (y[:, 1::3] * 2.0 + (self.anchors[1] - 0.5)) * self.strides
            return y

        def forward(self, x):
            feats = self.trunk(x)
            det = self.detect(feats)
            if kind == "v8_pose":
                return torch.cat((det, self.keypoints(feats)), 1)
            if kind == "v8_seg":
                b = x.shape[0]
                coeffs = torch.cat([m(f).view(b, 32, -1) for m, f in zip(self.mask, feats)], 2)
                return torch.cat((det, coeffs), 1), self.proto(feats[0])
            return det

    return Yolo()
