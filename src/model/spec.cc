#include "src/model/spec.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/model/conv.h"
#include "src/model/norm.h"
#include "src/model/shape_layers.h"
#include "src/model/linear.h"

namespace ddplab {

const char* const kCnnSpec =
    "conv2d(1,8,3,padding=1),batchnorm2d(8),relu,maxpool2d(2),"
    "conv2d(8,16,3,padding=1),batchnorm2d(16),relu,maxpool2d(2),"
    "flatten,dropout(0.25),linear(64,32),relu,linear(32,10)";

std::string mlp_spec(const std::vector<int64_t>& layers, bool relu) {
  std::string s;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    if (i) s += relu ? ",relu," : ",";
    s += fmt::format("linear({},{})", layers[i], layers[i + 1]);
  }
  return s;
}

namespace {

using Shape = std::vector<int64_t>;
using Args = std::map<std::string, double>;

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// One kind of layer: its constructor's arguments in PyTorch's order (a default of NAN: required), the
// shape it makes of one sample's, its parameter count, and how it is built.
struct Kind {
  const char* name;
  std::vector<std::pair<const char*, double>> params;
  std::function<Shape(const Args&, const Shape&)> shape;  // throws std::string (the expectation)
  std::function<int64_t(const Args&)> num_params;
  // draw false: no reset_parameters draws (parameters zero, for a copy to fill).
  std::function<std::unique_ptr<Module>(const Args&, const std::string& name, Generator& gen, bool draw)> make;
  bool dropout = false, buffers = false;
};

int64_t I(const Args& a, const char* k) { return static_cast<int64_t>(a.at(k)); }

Shape expect_features(const Shape& in, int64_t features, const char* what) {
  if (in.size() != 1 || in[0] != features) {
    throw fmt::format("{} takes {} features per sample, got {}", what, features, shape_str(in));
  }
  return in;
}

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> k = {
      {"linear",
       {{"in_features", NAN}, {"out_features", NAN}},
       [](const Args& a, const Shape& in) {
         expect_features(in, I(a, "in_features"), "linear's input (flatten images first)");
         return Shape{I(a, "out_features")};
       },
       [](const Args& a) { return I(a, "in_features") * I(a, "out_features") + I(a, "out_features"); },
       [](const Args& a, const std::string& name, Generator& gen, bool draw) {
         return std::make_unique<Linear>(I(a, "in_features"), I(a, "out_features"), name, gen, draw);
       }},
      {"unused_linear",  // registered, never called: the unused branch (find_unused_parameters)
       {{"in_features", NAN}, {"out_features", NAN}},
       [](const Args& a, const Shape& in) {
         if (I(a, "in_features") < 1 || I(a, "out_features") < 1) {
           throw fmt::format("in_features and out_features of at least 1, got ({}, {})", I(a, "in_features"),
                             I(a, "out_features"));
         }
         return in;  // never called: its input passes through
       },
       [](const Args& a) { return I(a, "in_features") * I(a, "out_features") + I(a, "out_features"); },
       [](const Args& a, const std::string& name, Generator& gen, bool draw) {
         return std::make_unique<UnusedLinear>(I(a, "in_features"), I(a, "out_features"), name, gen, draw);
       }},
      {"relu",
       {},
       [](const Args&, const Shape& in) { return in; },
       [](const Args&) { return int64_t{0}; },
       [](const Args&, const std::string&, Generator&, bool) { return std::make_unique<ReLU>(); }},
      {"flatten",
       {},
       [](const Args&, const Shape& in) {
         int64_t n = 1;
         for (int64_t d : in) n *= d;
         return Shape{n};
       },
       [](const Args&) { return int64_t{0}; },
       [](const Args&, const std::string&, Generator&, bool) { return std::make_unique<Flatten>(); }},
      {"conv2d",
       {{"in_channels", NAN}, {"out_channels", NAN}, {"kernel_size", NAN}, {"stride", 1}, {"padding", 0}, {"bias", 1}},
       [](const Args& a, const Shape& in) {
         if (in.size() != 3 || in[0] != I(a, "in_channels")) {
           throw fmt::format("an input of [{}, H, W] per sample, got {}", I(a, "in_channels"), shape_str(in));
         }
         const nn::Conv2dShape s{1,
                                 in[0],
                                 in[1],
                                 in[2],
                                 I(a, "out_channels"),
                                 I(a, "kernel_size"),
                                 I(a, "stride"),
                                 I(a, "padding"),
                                 a.at("bias") != 0};
         const std::string why = nn::conv2d_check(s);
         if (!why.empty()) throw fmt::format("a valid convolution of {} ({})", shape_str(in), why);
         return Shape{s.c_out, s.out_h(), s.out_w()};
       },
       [](const Args& a) {
         const int64_t out = I(a, "out_channels"), k = I(a, "kernel_size");
         return out * I(a, "in_channels") * k * k + (a.at("bias") != 0 ? out : 0);
       },
       [](const Args& a, const std::string& name, Generator& gen, bool draw) {
         return std::make_unique<Conv2d>(I(a, "in_channels"), I(a, "out_channels"), I(a, "kernel_size"), I(a, "stride"),
                                         I(a, "padding"), a.at("bias") != 0, name, gen, draw);
       }},
      {"maxpool2d",
       {{"kernel_size", NAN}, {"stride", 0}, {"padding", 0}},
       [](const Args& a, const Shape& in) {
         if (in.size() != 3) throw fmt::format("an input of [C, H, W] per sample, got {}", shape_str(in));
         const nn::MaxPool2dShape s{1, in[0], in[1], in[2], I(a, "kernel_size"), I(a, "stride"), I(a, "padding")};
         const std::string why = nn::maxpool2d_check(s);
         if (!why.empty()) throw fmt::format("a valid pooling of {} ({})", shape_str(in), why);
         return Shape{s.c, s.out_h(), s.out_w()};
       },
       [](const Args&) { return int64_t{0}; },
       [](const Args& a, const std::string&, Generator&, bool) {
         return std::make_unique<MaxPool2d>(I(a, "kernel_size"), I(a, "stride"), I(a, "padding"));
       }},
      {"batchnorm1d",
       {{"num_features", NAN}, {"eps", 1e-5}, {"momentum", 0.1}},
       [](const Args& a, const Shape& in) {
         if ((in.size() != 1 && in.size() != 2) || in[0] != I(a, "num_features")) {
           throw fmt::format("an input of [{}] or [{}, L] per sample, got {}", I(a, "num_features"),
                             I(a, "num_features"), shape_str(in));
         }
         return in;
       },
       [](const Args& a) { return 2 * I(a, "num_features"); },
       [](const Args& a, const std::string& name, Generator&, bool) {
         return std::make_unique<BatchNorm>(I(a, "num_features"), a.at("eps"), a.at("momentum"), 1, name);
       },
       false,
       true},
      {"batchnorm2d",
       {{"num_features", NAN}, {"eps", 1e-5}, {"momentum", 0.1}},
       [](const Args& a, const Shape& in) {
         if (in.size() != 3 || in[0] != I(a, "num_features")) {
           throw fmt::format("an input of [{}, H, W] per sample, got {}", I(a, "num_features"), shape_str(in));
         }
         return in;
       },
       [](const Args& a) { return 2 * I(a, "num_features"); },
       [](const Args& a, const std::string& name, Generator&, bool) {
         return std::make_unique<BatchNorm>(I(a, "num_features"), a.at("eps"), a.at("momentum"), 2, name);
       },
       false,
       true},
      {"layernorm",
       {{"normalized_shape", NAN}, {"eps", 1e-5}},
       [](const Args& a, const Shape& in) {
         if (in.empty() || in.back() != I(a, "normalized_shape")) {
           throw fmt::format("an input whose last dimension is {} per sample, got {}", I(a, "normalized_shape"),
                             shape_str(in));
         }
         return in;
       },
       [](const Args& a) { return 2 * I(a, "normalized_shape"); },
       [](const Args& a, const std::string& name, Generator&, bool) {
         return std::make_unique<LayerNorm>(I(a, "normalized_shape"), a.at("eps"), name);
       }},
      {"dropout",
       {{"p", 0.5}},
       [](const Args&, const Shape& in) { return in; },
       [](const Args&) { return int64_t{0}; },
       [](const Args& a, const std::string&, Generator& gen, bool) {
         return std::make_unique<Dropout>(a.at("p"), gen);
       },
       true},
      {"tanh",
       {},
       [](const Args&, const Shape& in) { return in; },
       [](const Args&) { return int64_t{0}; },
       [](const Args&, const std::string&, Generator&, bool) {
         return std::make_unique<Activation>(Activation::Kind::tanh);
       }},
      {"sigmoid",
       {},
       [](const Args&, const Shape& in) { return in; },
       [](const Args&) { return int64_t{0}; },
       [](const Args&, const std::string&, Generator&, bool) {
         return std::make_unique<Activation>(Activation::Kind::sigmoid);
       }},
      // approximate='none' | 'tanh' reads as 0 | 1 (parse_layer).
      {"gelu",
       {{"approximate", 0}},
       [](const Args&, const Shape& in) { return in; },
       [](const Args&) { return int64_t{0}; },
       [](const Args& a, const std::string&, Generator&, bool) {
         return std::make_unique<Activation>(a.at("approximate") != 0 ? Activation::Kind::gelu_tanh
                                                                      : Activation::Kind::gelu);
       }},
  };
  return k;
}

// "name(a,b,key=v)" -> the kind and its arguments, defaults filled in. Throws std::string.
LayerSpec parse_layer(const std::string& text) {
  LayerSpec l;
  l.text = text;
  const size_t open = text.find('(');
  l.kind = text.substr(0, open);
  const Kind* kind = nullptr;
  std::vector<std::string> names;
  for (const Kind& k : kinds()) {
    names.push_back(k.name);
    if (l.kind == k.name) kind = &k;
  }
  if (!kind) throw fmt::format("a layer ({}), got '{}'", fmt::join(names, ", "), l.kind);
  std::vector<std::string> items;
  if (open != std::string::npos) {
    if (text.back() != ')') throw fmt::format("')' closing {}'s arguments", l.kind);
    const std::string inside = text.substr(open + 1, text.size() - open - 2);
    size_t start = 0;
    while (start <= inside.size() && !inside.empty()) {
      const size_t comma = inside.find(',', start);
      items.push_back(inside.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  size_t positional = 0;
  bool keywords = false;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    std::string key, value = item;
    if (eq != std::string::npos) {
      key = item.substr(0, eq);
      value = item.substr(eq + 1);
      keywords = true;
    } else {
      if (keywords) throw fmt::format("keyword arguments after positional ones in {}", l.kind);
      if (positional >= kind->params.size()) {
        throw fmt::format("at most {} arguments to {}, got '{}'", kind->params.size(), l.kind, item);
      }
      key = kind->params[positional++].first;
    }
    bool known = false;
    for (const auto& p : kind->params) known = known || key == p.first;
    if (!known) throw fmt::format("an argument of {}, got '{}'", l.kind, key);
    if (l.args.count(key)) throw fmt::format("{} given once, got it twice", key);
    if (key == "approximate") {  // GELU's: a string in PyTorch
      std::string v = value;
      v.erase(std::remove(v.begin(), v.end(), '\''), v.end());
      v.erase(std::remove(v.begin(), v.end(), '"'), v.end());
      if (v != "none" && v != "tanh") throw fmt::format("approximate='none' or 'tanh', got {}", value);
      value = v == "tanh" ? "1" : "0";
    }
    double v;
    if (value == "True" || value == "true") {
      v = 1;
    } else if (value == "False" || value == "false") {
      v = 0;
    } else {
      char* end = nullptr;
      v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(v))
        throw fmt::format("a number for {}, got '{}'", key, value);
    }
    l.args[key] = v;
  }
  for (const auto& [name, def] : kind->params) {
    if (l.args.count(name)) continue;
    if (std::isnan(def)) throw fmt::format("{} needs {}", l.kind, name);
    l.args[name] = def;
  }
  return l;
}

const Kind& kind_of(const std::string& name) {
  for (const Kind& k : kinds()) {
    if (name == k.name) return k;
  }
  throw std::logic_error("unknown layer kind " + name);
}

}  // namespace

ModelPlan plan_model(const std::string& spec, const std::vector<int64_t>& sample_shape) {
  ModelPlan plan;
  // Split at top-level commas (not those inside a layer's parentheses).
  std::vector<std::string> texts;
  int depth = 0;
  std::string cur;
  for (char ch : spec) {
    if (ch == ' ') continue;
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
    if (depth < 0) throw UsageError(fmt::format("--model: unbalanced ')' in '{}'", spec));
    if (ch == ',' && depth == 0) {
      texts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  texts.push_back(cur);
  if (depth != 0) throw UsageError(fmt::format("--model: unbalanced '(' in '{}'", spec));
  if (texts.size() > 1000) throw UsageError(fmt::format("--model: at most 1000 layers (got {})", texts.size()));
  Shape shape = sample_shape;
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      if (texts[i].empty()) throw std::string("a layer, got nothing");
      LayerSpec l = parse_layer(texts[i]);
      l.position = i + 1;
      const Kind& k = kind_of(l.kind);
      for (const auto& [name, v] : l.args) {
        const bool real = name == "p" || name == "eps" || name == "momentum";
        if (!real && v != std::floor(v)) throw fmt::format("a whole number for {}, got {}", name, v);
        if (v < 0 || v > (1 << 24)) throw fmt::format("{} in 0..{}, got {}", name, 1 << 24, v);
        if (name == "p" && v > 1) throw fmt::format("p in 0..1, got {}", v);
      }
      shape = k.shape(l.args, shape);
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      if (numel <= 0) throw fmt::format("an output with at least one element, got {}", shape_str(shape));
      plan.shapes.push_back(shape);
      plan.parameters += k.num_params(l.args);
      plan.activations += numel;
      plan.has_dropout = plan.has_dropout || k.dropout;
      plan.has_buffers = plan.has_buffers || k.buffers;
      plan.layers.push_back(std::move(l));
    } catch (const std::string& expected) {
      throw UsageError(fmt::format("--model: layer {} ('{}'): expected {}", i + 1, texts[i], expected));
    }
  }
  return plan;
}

Sequential build_model(const ModelPlan& plan, const std::string& prefix, Generator& gen, bool draw) {
  Sequential model(prefix);
  for (const LayerSpec& l : plan.layers) model.push_back(kind_of(l.kind).make(l.args, model.next_name(), gen, draw));
  return model;
}

}  // namespace ddplab
